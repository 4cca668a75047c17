"""Built-in money rules: spending limits, conflicting payment destinations, purchase windows."""

from __future__ import annotations

import math
from datetime import date, timedelta

from uac.checkpointer.state import EntityView, StateView
from uac.executor.builtin_common import (
    add_months,
    by_entity,
    day,
    days_left,
    flag,
    midnight,
    normalized,
    number,
    recheck_window,
    ref,
    text,
)
from uac.executor.rules import Finding, RuleContext, Severity, rule

ALL = "all"
"""The budget category that covers every transaction."""
_PERIODS = {
    "week": "week", "weekly": "week",
    "month": "month", "monthly": "month",
    "year": "year", "yearly": "year", "annual": "year", "annually": "year",
}


def period_bounds(period: str, today: date) -> tuple[date, date]:
    """First and last day of the calendar week (Monday first), month or year holding ``today``."""
    if period == "week":
        start = today - timedelta(days=today.weekday())
        return start, start + timedelta(days=6)
    if period == "year":
        return date(today.year, 1, 1), date(today.year, 12, 31)
    start = today.replace(day=1)
    return start, add_months(start, 1) - timedelta(days=1)


def _money(amount: float, currency: str | None) -> str:
    return f"{amount:.2f} {currency}" if currency else f"{amount:.2f}"


def spending_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`spending_limit`: a budget in its category's group; a transaction
    in the groups of its week, month and year below its category's (and below ``all`` when
    the amount is positive), so a budget only ever sums one period's transactions."""
    if view.entity_type == "budget":
        return (f"category:{normalized(text(view, 'category') or ALL)}",)
    when, amount = day(view, "date"), number(view, "amount")
    if when is None or amount is None:
        return ()
    categories = [normalized(text(view, "category") or "")] + ([ALL] if amount > 0 else [])
    return tuple(f"category:{c}|{p}:{period_bounds(p, when)[0].isoformat()}"
                 for c in categories for p in ("week", "month", "year"))


def _group_period(group: str | None) -> tuple[str, date] | None:
    """``category:x|month:2025-06-01`` -> ``("month", date(2025, 6, 1))``; None otherwise."""
    if group is None or "|" not in group:
        return None
    kind, _, start = group.rpartition("|")[2].partition(":")
    return kind, date.fromisoformat(start)


@rule("spending_limit", reads=("budget", "transaction"), time_based=True, requires=("budget",),
      group_by=spending_groups)
def spending_limit(state: StateView, ctx: RuleContext) -> list[Finding]:
    """Spending in a budget's category over the current week/month/year exceeds its limit.

    Spending is the sum of the amounts of the period's transactions in the
    category (case-insensitive; a negative amount in the category, a refund,
    offsets it). A budget for ``all`` (or no category) sums every positive
    amount, so income never offsets it. Transactions in another currency than
    the budget's are left out. Time-based: a new period starts from zero.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    budgets = state.of_type("budget")
    only = _group_period(state.group)
    if not budgets or (state.group is not None and only is None):
        return findings  # no budget, or a budget's own group (its transactions are below it)
    if only is not None:  # one period's group: it counts from its start to its end
        kind, first = only
        budgets = [b for b in budgets
                   if _PERIODS.get((text(b, "period") or "month").lower()) == kind]
        if not budgets:
            return findings
        if first > ctx.today:
            ctx.recheck_at(midnight(first))
            return findings
        if period_bounds(kind, ctx.today)[0] != first:
            return findings  # over: it has nothing to say any more
    transactions = [(when, amount, t) for t in state.of_type("transaction")
                    if (when := day(t, "date")) is not None
                    and (amount := number(t, "amount")) is not None]
    for budget in budgets:
        limit = number(budget, "limit")
        period = _PERIODS.get((text(budget, "period") or "month").lower())
        if limit is None or period is None:
            continue
        category = normalized(text(budget, "category") or ALL)
        currency = text(budget, "currency")
        start, end = period_bounds(period, ctx.today)
        ctx.recheck_at(midnight(end + timedelta(days=1)))  # a new period starts from zero
        counted: list[tuple[float, EntityView]] = []
        for when, amount, t in transactions:
            if not start <= when <= end:
                continue
            t_currency = text(t, "currency")
            if currency and t_currency and t_currency.upper() != currency.upper():
                continue
            if category == ALL:
                if amount > 0:
                    counted.append((amount, t))
            elif normalized(text(t, "category") or "") == category:
                counted.append((amount, t))
        spent = round(math.fsum(a for a, _ in counted), 2)
        if spent <= limit:
            continue
        label = text(budget, "category") or ALL
        findings.append(Finding(
            subject=f"{ref(budget)}|{start.isoformat()}",
            message=(f"You spent {_money(spent, currency)} on {label} this {period} "
                     f"({start.isoformat()} to {end.isoformat()}), over your limit of "
                     f"{_money(limit, currency)}"),
            evidence=(budget.key, *(t.key for _, t in counted)),
            details={
                "category": label,
                "period": period,
                "spent": spent,
                "limit": limit,
                "currency": currency,
                "period_start": start.isoformat(),
                "period_end": end.isoformat(),
            },
        ))
    return findings


def _account_key(account: str) -> str:
    """Accounts compare without spaces, dashes or case (``DE89 3704`` == ``de893704``)."""
    return "".join(ch for ch in account.upper() if ch.isalnum())


def payee_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`payment_destination_conflict`: by payee."""
    payee, account = text(view, "payee"), text(view, "destination_account")
    return (normalized(payee),) if payee and account else ()


@rule("payment_destination_conflict", reads=("payment_instruction",), group_by=payee_groups)
def payment_destination_conflict(state: StateView, ctx: RuleContext) -> list[Finding]:
    """Payment instructions for the same payee name different destination accounts.

    Payees compare case- and whitespace-insensitively, accounts ignoring case,
    spaces and punctuation. A changed account is a classic fraud pattern, so
    this is critical until the wrong instruction is corrected or retracted.
    """
    groups: dict[str, list[tuple[str, EntityView]]] = {}
    for view in state.of_type("payment_instruction"):
        payee, account = text(view, "payee"), text(view, "destination_account")
        if payee and account:
            groups.setdefault(normalized(payee), []).append((account, view))
    findings: list[Finding] = []
    for payee, items in sorted(groups.items()):
        accounts: dict[str, str] = {}
        for account, _ in items:
            accounts.setdefault(_account_key(account), account)
        if len(accounts) < 2:
            continue
        shown = [accounts[k] for k in sorted(accounts)]
        findings.append(Finding(
            subject=f"payee:{payee}",
            message=(f"Conflicting payment destinations for {text(items[0][1], 'payee')}: "
                     f"{', '.join(shown)}; confirm the right account before paying"),
            severity=Severity.CRITICAL,
            evidence=tuple(view.key for _, view in items),
            details={
                "payee": payee,
                "accounts": shown,
                "instructions": [ref(view) for _, view in items],
            },
        ))
    return findings


@rule("warranty_or_return_lapsing", reads=("purchase",), time_based=True, group_by=by_entity)
def warranty_or_return_lapsing(state: StateView, ctx: RuleContext) -> list[Finding]:
    """A purchase's return window or warranty ends within ``lapse_days_ahead`` days.

    A returned purchase raises neither. Return and warranty have separate
    subjects (holding the date), so each is raised once and resolves once the
    date passes, the item is returned or the date is corrected.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    for view in state.of_type("purchase"):
        if flag(view, "returned") is True:
            continue
        item = text(view, "item") or view.entity_id
        for field, what, severity in (("return_by", "return", Severity.WARNING),
                                      ("warranty_until", "warranty", Severity.INFO)):
            until = day(view, field)
            if until is None:
                continue
            recheck_window(ctx, until - timedelta(days=ctx.lapse_days_ahead), until)
            days = (until - ctx.today).days
            if not 0 <= days <= ctx.lapse_days_ahead:
                continue
            noun = "The return window" if what == "return" else "The warranty"
            findings.append(Finding(
                subject=f"{ref(view)}|{what}|{until.isoformat()}",
                message=(f"{noun} for {item} ends {until.isoformat()} ({days_left(days)})"),
                severity=severity,
                evidence=(view.key,),
                details={
                    "item": item,
                    "kind": what,
                    "deadline": until.isoformat(),
                    "days_remaining": days,
                    "merchant": text(view, "merchant"),
                },
            ))
    return findings
