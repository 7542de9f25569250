"""What ``gpu-policy plan`` sizes from: the memory a process was measured to use, and headroom."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from webhook.contract import MEASUREMENTS_KIND
from webhook.policy.errors import PolicyError
from webhook.policy.quantity import QuantityError
from webhook.policy.quantity import parse_memory_mib as _memory_mib


@dataclass(frozen=True, slots=True)
class Measurement:
    """The memory one process was measured to use, on one product (None: on any GPU)."""

    memory_mib: int
    product: str | None = None
    workload: str | None = None

    def describe(self) -> str:
        """``nlp-inference 4621 MiB`` or ``4621 MiB``."""
        return (
            f"{self.workload} {self.memory_mib} MiB" if self.workload else f"{self.memory_mib} MiB"
        )


def parse_headroom(value: object) -> Fraction:
    """``10%``, ``10 %`` or ``0.1``: the share of each GPU's memory kept free; in [0, 0.9]."""
    text = str(value).strip()
    try:
        share = Fraction(text[:-1].strip()) / 100 if text.endswith("%") else Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise PolicyError("headroom", "", f"{value!r} is not a share such as 10% or 0.1") from None
    if not 0 <= share <= Fraction(9, 10):
        raise PolicyError("headroom", "", f"{value!r} is outside 0 % .. 90 %")
    return share


def parse_memory_mib(value: object, *, source: str = "measurement", field: str = "") -> int:
    """A memory quantity in MiB, rounded up: ``4621Mi``, ``4621MiB``, ``4.5Gi``, ``5G``, ``4621``.

    A bare number is MiB (nvidia-smi's unit). Decimal units (K, M, G, T) are powers of 1000.
    """
    try:
        return _memory_mib(value)
    except QuantityError as exc:
        raise PolicyError(source, field, str(exc)) from None


def parse_measure_arg(text: str) -> Measurement:
    """``--measure NVIDIA-L20=4621Mi`` (per product) or ``--measure 4621Mi`` (every product)."""
    product, sep, quantity = text.rpartition("=")
    if not sep:
        return Measurement(parse_memory_mib(text, source="--measure"))
    if not product.strip():
        raise PolicyError("--measure", text, "name a product before '=' (NVIDIA-L20=4621Mi)")
    return Measurement(parse_memory_mib(quantity, source="--measure"), product.strip())


def _workloads(doc: Mapping[str, object], source: str) -> list[Measurement]:
    workloads = doc.get("workloads") or []
    if not isinstance(workloads, list):
        raise PolicyError(source, "workloads", "must be a list")
    out = []
    for i, entry in enumerate(workloads):
        where = f"workloads[{i}]"
        if not isinstance(entry, Mapping) or "memory" not in entry:
            raise PolicyError(source, where, "needs at least memory: (and name:, product:)")
        product = entry.get("product")
        out.append(
            Measurement(
                parse_memory_mib(entry["memory"], source=source, field=f"{where}.memory"),
                None if product is None else str(product),
                None if entry.get("name") is None else str(entry["name"]),
            )
        )
    return out


def _products(doc: Mapping[str, object], source: str) -> list[Measurement]:
    products = doc.get("products") or {}
    if not isinstance(products, Mapping):
        raise PolicyError(source, "products", "must map products to memory")
    return [
        Measurement(
            parse_memory_mib(quantity, source=source, field=f"products.{product}"), str(product)
        )
        for product, quantity in products.items()
    ]


def parse_measurements(
    doc: object, *, source: str
) -> tuple[tuple[Measurement, ...], Fraction | None]:
    """A measurements document: its measurements and its headroom, if it states one.

    ```yaml
    apiVersion: gpu-policy.io/v1alpha1
    kind: Measurements
    headroom: 10%                  # optional
    workloads:                     # per workload, on one product or (no product) on any
      - {name: nlp-inference, product: NVIDIA-L20, memory: 4621Mi}
    products:                      # or per product
      Tesla-T4: 4401Mi
    ```
    """
    if not isinstance(doc, Mapping):
        raise PolicyError(source, "", "expected a mapping with workloads: and/or products:")
    if doc.get("kind", MEASUREMENTS_KIND) != MEASUREMENTS_KIND:
        raise PolicyError(source, "kind", f"expected {MEASUREMENTS_KIND}, found {doc['kind']!r}")
    out = _workloads(doc, source) + _products(doc, source)
    if not out:
        raise PolicyError(source, "", "no measurements (workloads: or products:)")
    headroom = doc.get("headroom")
    return tuple(out), None if headroom is None else parse_headroom(headroom)
