"""Countries, demonyms and major cities -> ISO 3166 alpha-2 codes, for the offline model. Pure."""

from __future__ import annotations

COUNTRIES: dict[str, str] = {
    "argentina": "AR", "australia": "AU", "austria": "AT", "belgium": "BE", "brazil": "BR",
    "canada": "CA", "chile": "CL", "china": "CN", "colombia": "CO", "croatia": "HR",
    "czech republic": "CZ", "czechia": "CZ", "denmark": "DK", "egypt": "EG", "finland": "FI",
    "france": "FR", "germany": "DE", "greece": "GR", "hungary": "HU", "iceland": "IS",
    "india": "IN", "indonesia": "ID", "ireland": "IE", "israel": "IL", "italy": "IT",
    "japan": "JP", "kenya": "KE", "south korea": "KR", "korea": "KR", "malaysia": "MY",
    "mexico": "MX", "morocco": "MA", "netherlands": "NL", "the netherlands": "NL",
    "holland": "NL", "new zealand": "NZ", "nigeria": "NG", "norway": "NO", "peru": "PE",
    "philippines": "PH", "the philippines": "PH", "poland": "PL", "portugal": "PT",
    "russia": "RU", "saudi arabia": "SA", "singapore": "SG", "south africa": "ZA",
    "spain": "ES", "sweden": "SE", "switzerland": "CH", "taiwan": "TW", "thailand": "TH",
    "turkey": "TR", "turkiye": "TR", "united arab emirates": "AE", "uae": "AE",
    "the uae": "AE", "united kingdom": "GB", "the united kingdom": "GB", "uk": "GB",
    "the uk": "GB", "england": "GB", "scotland": "GB", "wales": "GB", "great britain": "GB",
    "britain": "GB", "united states": "US", "the united states": "US", "usa": "US",
    "the us": "US", "the usa": "US", "us": "US", "america": "US", "vietnam": "VN",
}
"""Country names (lower case) -> ISO code."""

DEMONYMS: dict[str, str] = {
    "american": "US", "us": "US", "u.s.": "US", "british": "GB", "uk": "GB", "canadian": "CA",
    "mexican": "MX", "german": "DE", "french": "FR", "italian": "IT", "spanish": "ES",
    "portuguese": "PT", "dutch": "NL", "belgian": "BE", "swiss": "CH", "austrian": "AT",
    "irish": "IE", "swedish": "SE", "norwegian": "NO", "danish": "DK", "finnish": "FI",
    "polish": "PL", "greek": "GR", "turkish": "TR", "russian": "RU", "indian": "IN",
    "chinese": "CN", "japanese": "JP", "korean": "KR", "vietnamese": "VN", "thai": "TH",
    "australian": "AU", "brazilian": "BR", "argentinian": "AR", "egyptian": "EG",
    "israeli": "IL", "emirati": "AE", "south african": "ZA", "new zealand": "NZ",
    "singaporean": "SG", "indonesian": "ID", "schengen": "EU",
}
"""Adjectives before ``passport``/``visa`` (lower case) -> ISO code."""

CITIES: dict[str, str] = {
    "tokyo": "JP", "osaka": "JP", "kyoto": "JP", "seoul": "KR", "beijing": "CN",
    "shanghai": "CN", "hong kong": "HK", "taipei": "TW", "bangkok": "TH", "singapore": "SG",
    "hanoi": "VN", "bali": "ID", "jakarta": "ID", "manila": "PH", "delhi": "IN",
    "new delhi": "IN", "mumbai": "IN", "dubai": "AE", "abu dhabi": "AE", "istanbul": "TR",
    "tel aviv": "IL", "cairo": "EG", "marrakech": "MA", "nairobi": "KE", "cape town": "ZA",
    "london": "GB", "edinburgh": "GB", "manchester": "GB", "dublin": "IE", "paris": "FR",
    "nice": "FR", "lyon": "FR", "berlin": "DE", "munich": "DE", "hamburg": "DE",
    "frankfurt": "DE", "amsterdam": "NL", "brussels": "BE", "zurich": "CH", "geneva": "CH",
    "vienna": "AT", "prague": "CZ", "budapest": "HU", "warsaw": "PL", "krakow": "PL",
    "copenhagen": "DK", "stockholm": "SE", "oslo": "NO", "helsinki": "FI",
    "reykjavik": "IS", "madrid": "ES", "barcelona": "ES", "lisbon": "PT", "porto": "PT",
    "rome": "IT", "milan": "IT", "florence": "IT", "venice": "IT", "athens": "GR",
    "moscow": "RU", "sydney": "AU", "melbourne": "AU", "auckland": "NZ", "toronto": "CA",
    "vancouver": "CA", "montreal": "CA", "mexico city": "MX", "cancun": "MX",
    "rio de janeiro": "BR", "sao paulo": "BR", "buenos aires": "AR", "lima": "PE",
    "bogota": "CO", "santiago": "CL", "new york": "US", "new york city": "US", "nyc": "US",
    "los angeles": "US", "san francisco": "US", "chicago": "US", "boston": "US",
    "seattle": "US", "miami": "US", "austin": "US", "denver": "US", "washington": "US",
    "las vegas": "US", "honolulu": "US", "hawaii": "US", "orlando": "US", "new orleans": "US",
}
"""Major cities and regions (lower case) -> ISO code of their country."""


def country_code(place: str) -> str | None:
    """The ISO code of a country or known city name (case-insensitive), else None."""
    key = " ".join(place.lower().replace(".", " ").split())
    return COUNTRIES.get(key) or CITIES.get(key)


def demonym_code(adjective: str) -> str | None:
    """The ISO code for ``German``/``Japanese``/``US`` ..., else None."""
    return DEMONYMS.get(adjective.lower()) or country_code(adjective)


_CODES = frozenset(COUNTRIES.values()) | frozenset(CITIES.values())


def iso_code(value: str) -> str | None:
    """A stored country (``DE``, ``de``, ``Germany``) as its ISO code, else None."""
    code = value.strip().upper()
    return code if len(code) == 2 and code in _CODES else country_code(value)
