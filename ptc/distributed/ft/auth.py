"""The job secret: where it comes from, and how membership is proven with it.

Every member of a job and its coordinator share one secret.  It never
crosses the wire: on connect the coordinator sends a random nonce, and the
worker's ``hello`` carries ``HMAC-SHA256(secret, nonce || job || worker)``
(:func:`hello_proof`); the worker sends a nonce of its own in the same
hello, and the coordinator's ``welcome`` answers it (:func:`welcome_proof`),
so a worker never takes orders from a coordinator that does not know the
secret either.  Proofs are compared with :func:`hmac.compare_digest`.

Where the secret comes from, first match wins (:func:`resolve`):
``secret=`` (str or bytes), ``secret_file=`` (a path; surrounding whitespace
is stripped), ``$PTC_FT_SECRET``, ``$PTC_FT_SECRET_FILE``.  A secret has at
least :data:`MIN_SECRET_BYTES` bytes; :func:`new_secret` makes one.
:class:`~ptc.distributed.ft.launch.LocalJob` generates one per job and hands
it to its workers in ``$PTC_FT_SECRET``; under ``torchrun`` without one
configured, the first worker generates it and publishes it in torchrun's
store next to the coordinator's address (so it is as private as that
store; set ``$PTC_FT_SECRET_FILE`` on every node for a secret that never
travels).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from typing import Mapping, Optional, Union

from ptc.errors import PtcValueError

ENV_SECRET = "PTC_FT_SECRET"
ENV_SECRET_FILE = "PTC_FT_SECRET_FILE"
MIN_SECRET_BYTES = 16
NONCE_BYTES = 32  # hex on the wire: wire.HEX_CHARS digits

Secret = Union[str, bytes]

HOW_TO_MAKE_ONE = "e.g. python -c 'import secrets; print(secrets.token_hex(32))' > secret; chmod 600 secret"


def new_secret() -> str:
    """A fresh random secret (64 hex digits)."""
    return secrets.token_hex(32)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def _checked(value: Secret, origin: str) -> bytes:
    if isinstance(value, str):
        value = os.fsencode(value)  # UTF-8; an environment variable's bytes round-trip exactly
    if not isinstance(value, bytes):
        raise PtcValueError(f"{origin}: expected str or bytes, got {type(value).__name__}")
    if b"\0" in value:
        raise PtcValueError(f"{origin}: a job secret cannot hold NUL bytes (it travels in environment variables)")
    if len(value) < MIN_SECRET_BYTES:
        raise PtcValueError(f"{origin}: {len(value)} bytes; a job secret has at least {MIN_SECRET_BYTES} "
                            f"({HOW_TO_MAKE_ONE})")  # fmt: skip
    return value


def _read(path: Union[str, os.PathLike], origin: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError as exc:
        raise PtcValueError(f"{origin} = {str(path)!r}: cannot read the job secret ({exc.strerror})") from None
    return _checked(data.strip(), f"{origin} = {str(path)!r}")


def resolve(secret: Optional[Secret] = None, secret_file: Optional[Union[str, os.PathLike]] = None, *,
            environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:  # fmt: skip
    """The job secret from the first of ``secret``, ``secret_file``, ``$PTC_FT_SECRET``,
    ``$PTC_FT_SECRET_FILE`` that is set; None when none is."""
    environ = os.environ if environ is None else environ
    if secret is not None and secret_file is not None:
        raise PtcValueError("secret and secret_file: pass one of them, not both")
    if secret is not None:
        return _checked(secret, "secret")
    if secret_file is not None:
        return _read(secret_file, "secret_file")
    if environ.get(ENV_SECRET):
        return _checked(environ[ENV_SECRET], f"${ENV_SECRET}")
    if environ.get(ENV_SECRET_FILE):
        return _read(environ[ENV_SECRET_FILE], f"${ENV_SECRET_FILE}")
    return None


def _mac(secret: bytes, *parts: object) -> str:
    # a JSON array: one unambiguous encoding of the parts, whatever characters a job id holds
    payload = json.dumps(list(parts), separators=(",", ":")).encode()
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def hello_proof(secret: bytes, nonce: str, job: str, worker: int) -> str:
    """What a worker answers to the coordinator's challenge ``nonce``."""
    return _mac(secret, "ptc-ft hello", nonce, job, worker)


def welcome_proof(secret: bytes, worker_nonce: str, nonce: str, job: str, worker: int) -> str:
    """What the coordinator answers to the worker's ``worker_nonce`` (bound to its own challenge)."""
    return _mac(secret, "ptc-ft welcome", worker_nonce, nonce, job, worker)


def matches(expected: str, got: Optional[str]) -> bool:
    """Constant-time comparison of two proofs (False when ``got`` is missing)."""
    return isinstance(got, str) and hmac.compare_digest(expected.encode(), got.encode())
