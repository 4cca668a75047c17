"""Offline-model parsers for money: transactions, budgets, payment instructions, purchases.
Pure: each reads one sentence and the memory."""

from __future__ import annotations

import re
from datetime import date

from uac.extraction.offline_dates import (
    Money,
    find_dates,
    find_duration,
    find_money,
    shift,
)
from uac.extraction.offline_memory import (
    NAME,
    Context,
    Draft,
    Known,
    Sentence,
    affirmed,
    clean_phrase,
    content_words,
    make_fact,
    update,
    words,
)

_I = re.IGNORECASE
CATEGORIES: dict[str, str] = {
    "dinner": "dining", "lunch": "dining", "breakfast": "dining", "brunch": "dining",
    "dining": "dining", "restaurant": "dining", "restaurants": "dining", "meal": "dining",
    "takeout": "dining", "takeaway": "dining", "sushi": "dining", "pizza": "dining",
    "drinks": "dining", "bistro": "dining", "cafe": "dining", "eating": "dining",
    "groceries": "groceries", "grocery": "groceries", "supermarket": "groceries",
    "coffee": "coffee", "gas": "fuel", "fuel": "fuel", "petrol": "fuel", "taxi": "transport",
    "uber": "transport", "train": "transport", "bus": "transport", "rent": "rent",
    "clothes": "clothing", "clothing": "clothing", "shopping": "shopping",
    "entertainment": "entertainment", "movies": "entertainment", "travel": "travel",
    "everything": "all", "total": "all", "overall": "all", "all": "all",
}
"""Words of a spending phrase -> budget/transaction category (first known word wins)."""
_MONEY = r"(?:[$€£]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?(?:usd|eur|gbp|dollars?|euros?|pounds?|bucks))"
_PERIOD = r"(?P<period>week|month|year|weekly|monthly|yearly|annually|annual)"
_PERIODS = {"weekly": "week", "monthly": "month", "yearly": "year", "annually": "year",
            "annual": "year"}


def category(phrase: str) -> str | None:
    """``dining out``/``dinner`` -> ``dining``; an unknown phrase is its own category."""
    tokens = words(phrase)
    known = next((CATEGORIES[w] for w in tokens if w in CATEGORIES), None)
    if known is not None:
        return known
    rest = [w for w in tokens if w not in {"my", "the", "on", "spending", "expenses", "out", "a"}]
    return " ".join(rest[:3]) or None


_SPENT = re.compile(rf"\bI\s+(?:just\s+)?(?:spent|paid|dropped)\s+(?P<money>{_MONEY})", _I)
_MEAL = re.compile(rf"\b(?P<what>dinner|lunch|breakfast|brunch|coffee|drinks)\s+at\s+(?P<at>{NAME})"
                   rf".*?\b(?:cost|was|came\s+to)\s+(?:me\s+|us\s+)?(?P<money>{_MONEY})", _I)
_AT = re.compile(rf"\b(?:at|to|from)\s+(?P<at>{NAME})")
_ON = re.compile(r"\b(?:on|for)\s+(?P<on>(?:some\s+|a\s+|the\s+|my\s+)?[a-z][\w-]*(?:\s+(?:out|"
                 r"shopping|food|delivery))?)\b", _I)


def transactions(s: Sentence, ctx: Context) -> list[Draft]:
    """``I spent $120 at Lupa on dinner``; ``Dinner at Bistro 9 cost me $110``."""
    m = _SPENT.search(s.text) or _MEAL.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()) or find_account(s.text):
        return []
    money = find_money(m["money"])[0]
    groups = m.groupdict()
    tail = s.text[m.end():]
    merchant = groups.get("at") or (at[0] if (at := _AT.search(tail)) else None)
    on = _ON.search(tail)
    what = groups.get("what") or (on["on"] if on and not find_dates(on[0], s.today) else None)
    cat = category(what) if what else None
    if cat is None and merchant:
        cat = next((CATEGORIES[w] for w in words(merchant) if w in CATEGORIES), None)
    when = find_dates(s.text, s.today, future=False)
    day = when[0].value if when else s.today
    if isinstance(merchant, str):
        merchant = re.sub(r"^(?:at|to|from)\s+", "", merchant)
    return [(m.start(), make_fact(s, "transaction", {
        "amount": money.amount, "currency": money.currency, "date": day.isoformat(),
        "category": cat, "merchant": merchant}, valid=day.isoformat()))]


_BUDGET = (
    re.compile(r"\b(?:I\s+(?:want|need|would\s+like|'d\s+like|plan|am\s+trying|'m\s+trying|try)\s+"
               r"to|I(?:'ll|\s+will|\s+must|\s+should)|help\s+me|let's)\s+(?:keep|limit|cap)\s+"
               r"(?:my\s+)?(?P<cat>[\w\s-]+?)\s+(?:spending\s+|expenses\s+|costs\s+)?(?:under|below|"
               rf"to|at|within|at\s+most|to\s+at\s+most)\s+(?P<money>{_MONEY})\s*(?:a|per|each|every|"
               rf"/|in\s+a)\s*{_PERIOD}\b", _I),
    re.compile(rf"\bmy\s+(?P<cat>[\w\s-]+?)\s+budget\s+is\s+(?P<money>{_MONEY})\s*(?:a|per|each|/)\s*"
               rf"{_PERIOD}\b", _I),
    re.compile(rf"\bmy\s+{_PERIOD}\s+(?P<cat>[\w\s-]+?)\s+budget\s+is\s+(?P<money>{_MONEY})", _I),
    re.compile(rf"\bI\s+(?:set|have|made)\s+(?:myself\s+)?an?\s+(?P<money>{_MONEY})\s+{_PERIOD}\s+"
               r"budget\s+for\s+(?P<cat>[\w\s-]+?)(?=[.,;!?]|$|\s+(?:and|but)\b)", _I),
)


def budgets(s: Sentence, ctx: Context) -> list[Draft]:
    """``I want to keep dining out under $300 a month``; ``my grocery budget is $400 a month``."""
    for pattern in _BUDGET:
        m = pattern.search(s.text)
        if m is None or not affirmed(s.text, m.start(), m.end()):
            continue
        money = find_money(m["money"])[0]
        phrase = re.sub(r"^(?:spending|expenses)\s+on\s+", "", m["cat"].strip(), flags=_I)
        period = m["period"].lower()
        return [(m.start(), make_fact(s, "budget", {
            "category": category(phrase) or "all", "limit": money.amount,
            "currency": money.currency, "period": _PERIODS.get(period, period)}))]
    return []


_IBAN = re.compile(r"(?-i:\b[A-Z]{2}\d{2}(?:\s?[A-Z0-9]{4}){2,7}(?:\s?[A-Z0-9]{1,3})?\b)")
_ACCOUNT_NO = re.compile(r"\baccount\s+(?:number\s+|no\.?\s+|#\s*)?(?:is\s+)?(?P<n>\d[\d -]{4,}\d)\b",
                         _I)
_ROLES = ("landlord", "landlady", "property manager", "property management", "accountant",
          "employer", "contractor", "cleaner", "nanny", "babysitter", "gardener", "plumber",
          "electrician", "tutor", "therapist", "mechanic", "builder")
_ROLE = re.compile(r"\bmy\s+(?P<role>" + "|".join(_ROLES) + r")\b", _I)
_PAYEE = (
    re.compile(rf"\bpa(?:y|ys|ying|id)\s+(?:to\s+)?(?P<payee>{NAME})", _I),
    re.compile(rf"\bto\s+(?P<payee>{NAME})(?:'s)?\s*,?\s*(?:at\s+|to\s+|on\s+)?(?:(?:bank\s+)?account|"
               r"IBAN)\b", _I),
    re.compile(rf"\b(?P<payee>{NAME})(?:'s|s')\s+(?:new\s+)?(?:bank\s+)?(?:account|IBAN)\b"),
)
_LEASE_ROLES = frozenset({"landlord", "landlady", "property manager", "property management"})


def find_account(text: str) -> str | None:
    """An IBAN (``DE89 3704 0044 0532 0130 00``) or ``account number 12345678``."""
    m = _IBAN.search(text)
    if m:
        return m[0]
    m = _ACCOUNT_NO.search(text)
    return m["n"] if m else None


def _role_payee(role: str, ctx: Context) -> str:
    """``my landlord`` -> the counterparty of the lease in memory (else the role itself)."""
    if role.lower() in _LEASE_ROLES:
        lease = ctx.memory.latest(("contract",), lambda k: bool(k.attributes.get("counterparty"))
                                  and "lease" in words(f"{k.attributes.get('kind')} "
                                                       f"{k.attributes.get('title')}"))
        if lease is not None:
            return str(lease.attributes["counterparty"])
    return role.lower()


def payments(s: Sentence, ctx: Context) -> list[Draft]:
    """``Pay Greenfield Property Management 1450 EUR to account DE89 ...``; ``my landlord's
    new account is GB33 ...`` (amount and currency carried over from the payee's last one)."""
    account = find_account(s.text)
    if account is None:
        return []
    payee, where = None, 0
    for pattern in _PAYEE:
        m = pattern.search(s.text)
        if m and m["payee"].lower() not in {"i", "iban", "my"}:
            payee, where = m["payee"], m.start()
            break
    role = _ROLE.search(s.text)
    if role and (payee is None or role.start() < where):
        payee, where = _role_payee(role["role"], ctx), role.start()
    if payee is None or not affirmed(s.text, 0, s.text.find(account)):
        return []
    money: list[Money] = find_money(s.text)
    attrs: dict[str, object] = {"payee": payee, "destination_account": account}
    if money:
        attrs |= {"amount": money[0].amount, "currency": money[0].currency}
    elif (last := ctx.memory.latest(("payment_instruction",), lambda k: str(
            k.attributes.get("payee", "")).lower() == payee.lower())) is not None:
        attrs |= {k: last.attributes.get(k) for k in ("amount", "currency")}
    due = re.search(r"\b(?:due|by)\b", s.text, _I)
    if due and (when := find_dates(s.text[due.end():], s.today)):
        attrs["due_date"] = when[0].value.isoformat()
    return [(where, make_fact(s, "payment_instruction", attrs))]


_BOUGHT = re.compile(r"\bI(?:'ve|\s+have)?\s+(?:just\s+|finally\s+)?(?:bought|purchased|ordered|got)"
                     r"\s+(?:myself\s+)?(?P<item>.+?)(?=\s+(?:for|at|from|on|yesterday|today|last|this|"
                     r"with|and)\b|[,;.!?]|$)", _I)
_CHUNKS = re.compile(r"[,;]|\band\b|\bbut\b", _I)


def _chunk(text: str, keyword: str) -> str | None:
    """The comma/``and``-delimited part of ``text`` holding ``keyword``."""
    for part in _CHUNKS.split(text):
        if re.search(rf"\b{keyword}", part, _I):
            return part
    return None


def _until(chunk: str | None, bought: date, today: date) -> date | None:
    """``until August 10`` -> that date; ``within 30 days``/``two years`` -> counted from purchase."""
    if chunk is None:
        return None
    dates = find_dates(chunk, today)
    if dates:
        return dates[0].value
    length = find_duration(chunk)
    if length is None:
        return None
    return shift(bought, length[0], length[1])


def purchases(s: Sentence, ctx: Context) -> list[Draft]:
    """``I bought noise-cancelling headphones for $349 at SoundShop; I can return them until
    August 10 and the warranty runs two years``."""
    m = _BOUGHT.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    money = find_money(s.text)
    item = clean_phrase(m["item"], ("a", "an", "the", "some", "new", "my", "pair", "of"))
    if not money or not item or set(words(item)) & {"it", "them", "this", "that"}:
        return []
    warranty = _chunk(s.text, "warrant") or _chunk(s.text, "guarantee")
    returns = _chunk(s.text, "return")
    rest = " ".join(p for p in _CHUNKS.split(s.text) if p not in (warranty, returns))
    when = find_dates(rest, s.today, future=False)
    bought = when[0].value if when else s.today
    at = _AT.search(s.text, m.end())
    return_by = _until(returns, bought, s.today)
    warranty_until = _until(warranty, bought, s.today)
    return [(m.start(), make_fact(s, "purchase", {
        "item": item, "price": money[0].amount, "currency": money[0].currency,
        "purchased_on": bought.isoformat(), "merchant": at["at"] if at else None,
        "return_by": return_by.isoformat() if return_by else None,
        "warranty_until": warranty_until.isoformat() if warranty_until else None},
        valid=bought.isoformat() if when else None))]


_RETURNED = re.compile(r"\bI(?:'ve|\s+have)?\s+(?:just\s+|already\s+)?(?:returned|took\s+back|sent\s+"
                       r"back)\s+(?:the|my|those|that|these)\s+(?P<what>[^.,;!?]+)", _I)


def purchase_returned(s: Sentence, ctx: Context) -> list[Draft]:
    """``I returned the headphones``: a known purchase becomes ``returned``."""
    m = _RETURNED.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    query = content_words(m["what"], ("to", "them", "store", "shop", "yesterday", "today"))
    known: Known | None = ctx.memory.latest(("purchase",), lambda k: bool(query & k.text_words()))
    return [(m.start(), update(s, known, {"returned": True}))] if known else []
