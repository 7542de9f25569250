"""The pure audit of what already runs: GPU workloads judged by the webhook's engine, stuck GPU
pods explained from the nodes, and the results as text, JSON and Policy WG reports.

No kubernetes, no flask, no files: a shell lists the cluster (or reads dumps) page by page
into a ``Collector``, then calls ``audit()`` and renders the ``AuditResult``::

    collector = Collector()
    for page in pages:                      # items of a paged listing, or a dump's documents
        collector.add_all(page, kind="Pod")
    result = audit(collector, nodes, policy=policy, now=now)
    print(text(result)); sys.exit(result.exit_status())
"""

from webhook.audit.audit import AuditResult, audit, exit_status
from webhook.audit.findings import AUDIT_RULES, LEVELS, Finding, Ref, format_age
from webhook.audit.output import TableRow, document, summary_line, table_rows, text
from webhook.audit.owners import Collector, Group
from webhook.audit.reports import APIS, LABELS, REPORT_NAME, SOURCE, reports, selector, stale
from webhook.audit.trim import WORKLOAD_KINDS, trim

__all__ = [
    "APIS",
    "AUDIT_RULES",
    "LABELS",
    "LEVELS",
    "REPORT_NAME",
    "SOURCE",
    "WORKLOAD_KINDS",
    "AuditResult",
    "Collector",
    "Finding",
    "Group",
    "Ref",
    "TableRow",
    "audit",
    "document",
    "exit_status",
    "format_age",
    "reports",
    "selector",
    "stale",
    "summary_line",
    "table_rows",
    "text",
    "trim",
]
