"""Database passwords never in clear: masked wherever a URL is printed, handed to child processes through the
environment (readable by their owner only, never on a command line that `ps` shows every local user)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

ENV_VAR = "ORTHOLAB_DB"  # the store's URL for a child process (db/store.py reads it as the default)
HIDDEN = "***"
# scheme://user:password@host in any text: the password runs to the LAST '@' of its word, so an unencoded '@' or '/'
# in it is hidden too
URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s:/@'\"]*):(?P<password>[^\s'\"]*)@")
# a whole URL as SQLAlchemy reads one (engine/url.py): the user up to ':' or '/', the password up to the first '@',
# spaces included
WHOLE_URL_PASSWORD = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.\-]*://[^:/]*:(?P<password>[^@]*)@")
# a `password=` query parameter of a URL whole (a --db value): its value runs to the next '&'
QUERY_KEY = r"(?P<key>[?&](?:password|passwd|pwd|sslpassword)=)"
WHOLE_QUERY_PASSWORD = re.compile(rf"{QUERY_KEY}(?P<value>[^&\s'\"]*)", re.IGNORECASE)
# the same in text, where punctuation that ends the value before a space or the text's end is the text's
# (`...?password=***: no server`, `(...?password=***),`), not the value's
QUERY_PASSWORD = re.compile(
    rf"{QUERY_KEY}(?P<value>[^&\s'\"]*?)(?=[:;,.)\]}}>]*(?:[&\s'\"]|$))",
    re.IGNORECASE,
)


def mask_url(url: str) -> str:
    """`url` with its password (in the user info or a `password=` query parameter) replaced by ***, also one holding
    a space, which text around a URL could not tell from the URL's end."""
    whole = WHOLE_URL_PASSWORD.match(url)
    if whole and whole.group("password"):
        url = url[: whole.start("password")] + HIDDEN + url[whole.end("password") :]
    if not any(c.isspace() for c in url.strip()):  # one URL, nothing after it: a query password to its '&' or end
        url = WHOLE_QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}{HIDDEN}", url)
    return mask_secrets(url)


def passwords_in(url: str | None) -> list[str]:
    """The password(s) a URL holds, as written (for masking them wherever else they turn up)."""
    if not url:
        return []
    whole = WHOLE_URL_PASSWORD.match(url)
    found = [m.group("password") for m in URL_USERINFO.finditer(url)] + [
        m.group("value") for m in WHOLE_QUERY_PASSWORD.finditer(url)
    ]
    return list(dict.fromkeys(p for p in [whole.group("password") if whole else "", *found] if p))


def mask_secrets(text: str, known: Iterable[str] = ()) -> str:
    """`text` with every URL's password masked, and every known password (from --db, $ORTHOLAB_DB) wherever it
    appears, e.g. quoted back by a driver's error message."""
    text = URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{HIDDEN}@", text)
    text = QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}{HIDDEN}", text)
    for secret in sorted({s for s in known if len(s) >= 3}, key=len, reverse=True):  # 1-2 letters: too common
        text = text.replace(secret, HIDDEN)
    return text


def db_urls_in(argv: Iterable[str]) -> list[str]:
    """The `--db` values of a command line and $ORTHOLAB_DB: the URLs whose passwords this process knows."""
    argv, urls = list(argv), [os.environ.get(ENV_VAR, "")]
    for i, arg in enumerate(argv):
        if arg.startswith("--db="):
            urls.append(arg[len("--db=") :])
        elif arg == "--db" and i + 1 < len(argv):
            urls.append(argv[i + 1])
    return [u for u in urls if u]


def known_passwords(argv: Iterable[str]) -> list[str]:
    return [p for url in db_urls_in(argv) for p in passwords_in(url)]


GIVEN_VAR = "ORTHOLAB_DB_GIVEN"  # set by child_env: $ORTHOLAB_DB holds a parent's --db, not the user's own setting


def child_env(db_url: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child `ortholab` process that works on the store `db_url` (instead of `--db URL`)."""
    return {**(os.environ if base is None else base), ENV_VAR: db_url, GIVEN_VAR: "1"}


def check_db_url(url: str, source: str = "--db") -> None:
    """Refuse, before anything connects, a URL whose password would be misread: an unencoded '@' (SQLAlchemy
    would take what follows for the host and quote it back in its error) or a port that is not a number."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from ortholab.errors import ConfigError

    match = URL_USERINFO.match(url)
    if match and "@" in match.group("password"):
        raise ConfigError(
            f"{source} {mask_url(url)}: the password holds an '@'; percent-encode it as %40 "
            f"(and '/' as %2F, '%' as %25, a space as %20), or leave it out of the URL and set PGPASSWORD"
        )
    try:
        make_url(url)
    except ArgumentError:
        return  # not a URL at all: the Store says so, with the form a URL takes
    except ValueError as err:  # a port that is not a number
        raise ConfigError(
            f"{source} {mask_url(url)}: not a database URL ({err}); e.g. "
            f"postgresql+psycopg://user@host:5432/runs (a password after the user, ':'-separated) or "
            f"sqlite:////abs/path/runs.db"
        ) from None


class MaskedStream:
    """A text stream that masks passwords in what is written to it (e.g. `--print_config`, which prints --db)."""

    def __init__(self, stream, known: Iterable[str] = ()):
        self._stream, self._known = stream, list(known)

    def write(self, text: str) -> int:
        self._stream.write(mask_secrets(text, self._known))
        return len(text)

    def __getattr__(self, name):  # flush, isatty, encoding, ... as the stream has them
        return getattr(self._stream, name)
