"""Built-in health rule: an active medication against the user's allergies (with drug classes)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from uac.checkpointer.state import EntityView, StateView
from uac.executor.builtin_common import contains_run, ref, text, words
from uac.executor.rules import EVERY_GROUP, Finding, RuleContext, Severity, rule


@dataclass(frozen=True, slots=True)
class DrugClass:
    """A drug class: the terms that name the class itself and the drugs (and brands) in it.

    ``sibling`` is the severity when the allergen is one member and the medication another.
    """

    name: str
    label: str  # "a penicillin": reads after "is"
    aliases: tuple[str, ...]
    members: tuple[str, ...]
    sibling: Severity


DRUG_CLASSES: tuple[DrugClass, ...] = (
    DrugClass(
        "penicillins", "a penicillin",
        ("penicillin", "penicillins", "penicillin antibiotics"),
        ("penicillin", "penicillin v", "penicillin g", "amoxicillin", "amoxil", "ampicillin",
         "amoxicillin-clavulanate", "augmentin", "dicloxacillin", "cloxacillin", "flucloxacillin",
         "piperacillin", "piperacillin-tazobactam", "zosyn", "nafcillin", "oxacillin",
         "ticarcillin"),
        Severity.CRITICAL,
    ),
    DrugClass(
        "cephalosporins", "a cephalosporin",
        ("cephalosporin", "cephalosporins"),
        ("cephalexin", "keflex", "cefadroxil", "cefazolin", "cefaclor", "cefuroxime", "cefprozil",
         "cefpodoxime", "cefixime", "cefdinir", "cefotaxime", "ceftriaxone", "ceftazidime",
         "cefepime"),
        Severity.WARNING,
    ),
    DrugClass(
        "sulfonamides", "a sulfonamide",
        ("sulfonamide", "sulfonamides", "sulfa", "sulpha", "sulfa drugs", "sulfa antibiotics"),
        ("sulfamethoxazole", "trimethoprim-sulfamethoxazole", "sulfamethoxazole-trimethoprim",
         "bactrim", "septra", "co-trimoxazole", "cotrimoxazole", "sulfadiazine", "sulfasalazine"),
        Severity.CRITICAL,
    ),
    DrugClass(
        "nsaids", "an NSAID",
        ("nsaid", "nsaids", "non-steroidal anti-inflammatory", "nonsteroidal anti-inflammatory"),
        ("aspirin", "acetylsalicylic acid", "ibuprofen", "advil", "motrin", "naproxen", "aleve",
         "diclofenac", "voltaren", "celecoxib", "celebrex", "ketorolac", "indomethacin",
         "meloxicam"),
        Severity.CRITICAL,
    ),
    DrugClass(
        "opioids", "an opioid",
        ("opioid", "opioids", "opiate", "opiates"),
        ("codeine", "morphine", "hydrocodone", "oxycodone", "hydromorphone", "tramadol",
         "fentanyl", "vicodin", "percocet"),
        Severity.WARNING,
    ),
)
"""The drug-class table. Terms are matched as whole words, case-insensitively."""

CROSS_REACTIVE: dict[tuple[str, str], Severity] = {
    ("penicillins", "cephalosporins"): Severity.WARNING,
    ("cephalosporins", "penicillins"): Severity.WARNING,
}
"""(allergen class, medication class) pairs with possible cross-reactivity."""

STOPPED = frozenset({"stopped", "discontinued"})
"""Medication statuses that mean the user no longer takes it."""

_FILLER = frozenset({"allergy", "allergies", "allergic", "to", "drug", "drugs", "class",
                     "antibiotic", "antibiotics", "the"})
_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
_TERMS = {
    cls.name: (tuple(words(a) for a in cls.aliases), tuple(words(m) for m in cls.members))
    for cls in DRUG_CLASSES
}


@dataclass(frozen=True, slots=True)
class _Match:
    severity: Severity
    kind: str  # direct | class | same class | cross-reactivity
    drug_class: DrugClass | None
    allergen_class: DrugClass | None


def _has(texts: tuple[tuple[str, ...], ...], terms: tuple[tuple[str, ...], ...]) -> bool:
    return any(contains_run(t, term) for t in texts for term in terms)


@lru_cache(maxsize=4096)
def _classify(allergen: tuple[str, ...], med: tuple[tuple[str, ...], ...]) -> _Match | None:
    """The strongest reason the medication (name and class words) conflicts with the allergen."""
    med_classes = [c for c in DRUG_CLASSES if _has(med, _TERMS[c.name][0] + _TERMS[c.name][1])]
    named = [c for c in DRUG_CLASSES if _has((allergen,), _TERMS[c.name][0])]
    members = [c for c in DRUG_CLASSES
               if c not in named and _has((allergen,), _TERMS[c.name][1])]
    candidates: list[_Match] = []
    if any(contains_run(t, allergen) for t in med):
        shared = [c for c in med_classes if c in named or c in members]
        in_class = shared or med_classes
        candidates.append(_Match(Severity.CRITICAL, "direct", in_class[0] if in_class else None,
                                 shared[0] if shared else None))
    for cls in med_classes:
        if cls in named:
            candidates.append(_Match(Severity.CRITICAL, "class", cls, cls))
        elif cls in members:
            candidates.append(_Match(cls.sibling, "same class", cls, cls))
        for other in named + members:
            severity = CROSS_REACTIVE.get((other.name, cls.name))
            if severity is not None:
                candidates.append(_Match(severity, "cross-reactivity", cls, other))
    if not candidates:
        return None
    return max(candidates, key=lambda m: _RANK[m.severity])  # max keeps the first of equals


def _message(drug: str, allergen: str, match: _Match) -> str:
    cls = match.drug_class
    if match.kind == "direct" or cls is None:
        return f"{drug} matches your allergy to {allergen}"
    if match.kind == "class":
        return f"{drug} is {cls.label}; you are allergic to {allergen}"
    if match.kind == "same class":
        return f"{drug} is {cls.label}, like {allergen}, which you are allergic to"
    return (f"{drug} is {cls.label}; cross-reactivity is possible with your allergy to "
            f"{allergen}")


def _active(med: EntityView) -> bool:
    status = text(med, "status")
    return status is None or status.lower() not in STOPPED


def medication_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`drug_allergy`: each medication on its own, allergies everywhere."""
    return (EVERY_GROUP,) if view.entity_type == "allergy" else (ref(view),)


@rule("drug_allergy", reads=("allergy", "medication"), requires=("allergy",),
      group_by=medication_groups)
def drug_allergy(state: StateView, ctx: RuleContext) -> list[Finding]:
    """An active medication matches an allergy, directly or through its drug class.

    A direct or class match is critical; a penicillin allergy against a
    cephalosporin (cross-reactivity) is a warning, as are sibling opioids and
    sibling cephalosporins.
    """
    allergies = []
    for allergy in state.of_type("allergy"):
        substance = text(allergy, "substance")
        allergen = tuple(w for w in words(substance) if w not in _FILLER)
        if substance and allergen:
            allergies.append((allergy, substance, allergen))
    findings: list[Finding] = []
    if not allergies:
        return findings
    for med in state.of_type("medication"):
        if not _active(med):
            continue
        name, drug_class = text(med, "name"), text(med, "drug_class")
        med_words = tuple(w for w in (words(name), words(drug_class)) if w)
        if not med_words:
            continue
        drug = name or drug_class or med.entity_id
        for allergy, substance, allergen in allergies:
            match = _classify(allergen, med_words)
            if match is None:
                continue
            findings.append(Finding(
                subject=f"{ref(med)}|{ref(allergy)}",
                message=_message(drug, substance, match),
                severity=match.severity,
                evidence=(med.key, allergy.key),
                details={
                    "drug": drug,
                    "allergen": substance,
                    "class": match.drug_class.name if match.drug_class else None,
                    "allergen_class": match.allergen_class.name if match.allergen_class else None,
                    "match": match.kind,
                    "reaction": text(allergy, "reaction"),
                },
            ))
    return findings
