"""One device-plugin config as the plugin loads it: the resource names it advertises, their
replicas, and when it registers nothing at all.

:class:`PluginConfig` is what the rest of the code reads; ``mps_max_clients`` is the MPS control
daemon's limit (docs/device-plugin.md, "When the plugin serves nothing").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from webhook.policy.errors import Diagnostic
from webhook.policy.resources import GPU, ResourceForm

MigStrategy = Literal["none", "single", "mixed"]
SharingStrategy = Literal["none", "time-slicing", "mps"]
MIG_STRATEGIES: tuple[MigStrategy, ...] = ("none", "single", "mixed")

# api/config/v1/consts.go MaxResourceNameLength: the whole name, prefix included.
MAX_RESOURCE_NAME = 63
# cmd/mps-control-daemon/mps/device.go maxClients: the most MPS replicas the control daemon
# accepts per GPU, 48 from compute capability 7.5 on and 16 below it (docs/device-plugin.md,
# "MPS limits").
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_BELOW_7_5 = 16
MPS_FULL_LIMIT_FROM = (7, 5)

# cmd/nvidia-device-plugin/main.go validateFlags and api/config/v1/consts.go: the values the
# plugin starts with. An absent or null flag takes the command-line default, always valid.
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
ALLOCATION_POLICIES = ("distributed", "packed")
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    """What the plugin does with one resource name of the active sharing section.

    ``replicas`` is what the plugin advertises per device; ``labelled`` is what GFD labels
    as ``<name>.replicas``. They differ only when the name is listed twice: the plugin keeps
    the larger count, GFD the first entry's.
    """

    form: ResourceForm  # always the unshared form: the name the plugin replicates
    replicas: int
    labelled: int


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One device-plugin config file: one key of the plugin's ConfigMap."""

    key: str
    mig_strategy: MigStrategy
    strategy: SharingStrategy
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    resources: tuple[ReplicatedResource, ...]
    warnings: tuple[Diagnostic, ...] = ()

    def _entry(self, form: ResourceForm) -> ReplicatedResource | None:
        original = form.original
        for res in self.resources:
            if res.form.original == original:
                return res
        return None

    def replicas(self, form: ResourceForm) -> int:
        """How many replicas of each device the plugin advertises for ``form`` (1: not shared)."""
        entry = self._entry(form)
        return entry.replicas if entry is not None else 1

    def labelled_replicas(self, form: ResourceForm) -> int:
        """The ``<name>.replicas`` label GFD writes for ``form`` (1: not shared)."""
        entry = self._entry(form)
        return entry.labelled if entry is not None else 1

    def advertised(self, form: ResourceForm) -> ResourceForm:
        """The form the plugin advertises for devices of ``form``'s kind."""
        shared = self.replicas(form) > 1
        return form.with_renamed(shared and self.rename_by_default)

    def never_served(self, compute_capability: tuple[int, int] | None = None) -> str | None:
        """Why the plugin never registers any resource on a node running this config, or None.

        Only MPS has such configs: one that shares no device, or more replicas than the MPS
        control daemon admits on GPUs of ``compute_capability`` (None: not known, the highest
        limit is assumed). See docs/device-plugin.md, "When the plugin serves nothing".
        """
        if self.strategy != "mps":
            return None
        if not self.resources:
            return _MPS_SHARES_NOTHING
        replicas = max(res.replicas for res in self.resources)
        limit = mps_max_clients(compute_capability)
        if replicas > limit:
            return _mps_over_limit(replicas, limit)
        return None

    @property
    def serves_mig_instances(self) -> bool:
        """False when the plugin stops on MIG devices: MPS cannot share them.

        Under ``migStrategy: single`` on MIG-enabled GPUs every ``nvidia.com/gpu`` is a MIG
        instance, so such a node advertises nothing (docs/device-plugin.md, "When the plugin
        serves nothing").
        """
        return self.strategy != "mps"


def mps_max_clients(compute_capability: tuple[int, int] | None) -> int:
    """The most MPS replicas per GPU the control daemon accepts (mps/device.go maxClients).

    ``isAtLeastVolta`` compares the capability with ``v7.5`` (not Volta's 7.0): below 7.5 the
    limit is 16. An unknown capability gets the higher limit.
    """
    if compute_capability is not None and compute_capability < MPS_FULL_LIMIT_FROM:
        return MPS_MAX_CLIENTS_BELOW_7_5
    return MPS_MAX_CLIENTS


# What the plugin does when the MPS control daemon has no daemon for its resource
# (internal/plugin/mps.go waitForDaemon, server.go Start, main.go startPlugins).
_NEVER_REGISTERED = (
    f"the device plugin waits for that daemon, fails, restarts every 30 s and never registers "
    f"{GPU} on such a node"
)
_MPS_SHARES_NOTHING = (
    "MPS shares none of this config's devices: the MPS control daemon starts no daemon "
    f"('Resource is not shared'), yet {_NEVER_REGISTERED}"
)


def _mps_over_limit(replicas: int, limit: int) -> str:
    below = " (16 below compute capability 7.5)" if limit == MPS_MAX_CLIENTS else ""
    return (
        f"{replicas} MPS replicas per GPU, but the MPS control daemon accepts at most {limit}"
        f"{below} and refuses to start ('invalid MPS configuration: invalid device maximum "
        f"allowed replicas exceeded: {replicas} > {limit}'): {_NEVER_REGISTERED}"
    )
