"""Finance: transactions, accounts, budgets and limits, payment instructions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from uac.domains.catalog import entity, meta


@entity("transaction", domain="finance", table="transactions", key=())
@dataclass(frozen=True, slots=True)
class Transaction:
    """Money spent or received (amount > 0 is spending)."""

    amount: float | None = field(default=None, metadata=meta("amount spent", unit="currency"))
    currency: str | None = field(default=None, metadata=meta("ISO currency code"))
    date: date | None = field(default=None, metadata=meta("transaction date"))
    category: str | None = field(default=None, metadata=meta("e.g. groceries, dining"))
    merchant: str | None = field(default=None, metadata=meta("who was paid"))
    account: str | None = field(default=None, metadata=meta("account it came from"))


@entity("account", domain="finance", table="accounts", key=("name",))
@dataclass(frozen=True, slots=True)
class Account:
    """A bank or card account."""

    name: str | None = field(default=None, metadata=meta("account name"))
    institution: str | None = field(default=None, metadata=meta("bank"))
    kind: str | None = field(default=None, metadata=meta("checking | savings | credit"))
    number: str | None = field(default=None, metadata=meta("account number or IBAN"))


@entity("budget", domain="finance", table="budgets", key=("category", "period"))
@dataclass(frozen=True, slots=True)
class Budget:
    """A spending limit the user set for a category and period."""

    category: str | None = field(default=None, metadata=meta("category, or 'all'"))
    limit: float | None = field(default=None, metadata=meta("the limit", unit="currency"))
    currency: str | None = field(default=None, metadata=meta("ISO currency code"))
    period: str | None = field(default=None, metadata=meta("week | month | year"))


@entity("payment_instruction", domain="finance", table="payment_instructions",
        key=("payee", "destination_account"))
@dataclass(frozen=True, slots=True)
class PaymentInstruction:
    """Where to pay someone: a payee and a destination account."""

    payee: str | None = field(default=None, metadata=meta("who is paid"))
    destination_account: str | None = field(default=None, metadata=meta("IBAN or account"))
    amount: float | None = field(default=None, metadata=meta("amount", unit="currency"))
    currency: str | None = field(default=None, metadata=meta("ISO currency code"))
    due_date: date | None = field(default=None, metadata=meta("when it is due"))
