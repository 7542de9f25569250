"""Pure planning of a move from the device plugin to DRA, node by node (docs/migrate.md).

:func:`make_migration` builds the plan (classes, rewritten workloads and templates, quotas,
cutover steps with every GPU pod's place after each); :func:`check` judges a cluster in the
middle of one; :func:`plan_text`, :func:`check_text`, :func:`document` and :func:`files`
render them.
"""

from webhook.planning.migrate.check import CheckResult, check
from webhook.planning.migrate.plan import Migration, document, files, make_migration
from webhook.planning.migrate.report import check_text, plan_text

__all__ = [
    "CheckResult",
    "Migration",
    "check",
    "check_text",
    "document",
    "files",
    "make_migration",
    "plan_text",
]
