"""The pure policy core: no flask, no kubernetes, no network, no files opened."""

from webhook.policy.decision import Decision, RuleResult
from webhook.policy.engine import review
from webhook.policy.errors import PolicyError
from webhook.policy.inventory import Inventory, inventory_from_nodes, inventory_from_policy
from webhook.policy.model import NODE_SELECTION_MODES, NodeSelection, Policy, parse_policy
from webhook.policy.rules import RULES

__all__ = [
    "NODE_SELECTION_MODES",
    "RULES",
    "Decision",
    "Inventory",
    "NodeSelection",
    "Policy",
    "PolicyError",
    "RuleResult",
    "inventory_from_nodes",
    "inventory_from_policy",
    "parse_policy",
    "review",
]
