"""The NVIDIA device plugin's config file (api/config/v1), read the way the plugin reads it.

What the plugin refuses is refused here, with the plugin's reason, the file and the field
(every refusal of a file at once, the one the plugin stops on first). What it loads loads here
too. Where it silently ignores something (a removed or misspelt key, the ``rename`` and
``devices`` fields, an entry no device matches, the time-slicing section next to an MPS one),
the config carries a warning (a Diagnostic) saying so. Where it loads a config yet never
registers a resource (MPS past the control daemon's client limit, MPS that shares
nothing), :meth:`PluginConfig.never_served` says why and the inventory offers nothing. Every
rule, and the NVIDIA source it comes from, is listed in docs/device-plugin.md ("Config file",
"When the plugin serves nothing").

Field names are the plugin's own (``migStrategy``, ``renameByDefault``,
``failRequestsGreaterThanOne``, ``replicas``).

The package holds the config as loaded and the names it serves (``config``), the checks of
single fields (``fields``), the ``resources`` and ``sharing`` sections (``sections``), and the
reading of a file, its text or a ConfigMap (``read``); the names the rest of the code uses are
importable from the package itself.
"""

from webhook.policy.plugin_config.config import PluginConfig, mps_max_clients
from webhook.policy.plugin_config.read import (
    parse_plugin_config,
    parse_plugin_configmap,
    parse_plugin_text,
)

__all__ = [
    "PluginConfig",
    "mps_max_clients",
    "parse_plugin_config",
    "parse_plugin_configmap",
    "parse_plugin_text",
]
