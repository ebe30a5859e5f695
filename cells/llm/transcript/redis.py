"""The Redis store: one hash under ``transcript:{conversation}`` and a single-key Lua
compare-and-set, so any number of replicas can serve any turn.

The braces are a Redis Cluster hash tag (the slot depends on the id alone) and every operation
touches one key, so the script is cluster-safe. redis-py's ``register_script`` runs it with
EVALSHA and re-sends it when the server answers NOSCRIPT (its script cache empties on restart
or failover). Reads never extend the expiry; every write sets it.
"""

from __future__ import annotations

from typing import Any

from cells.llm.transcript.base import Record, StoreUnavailableError, WriteOutcome

CAS = """
local cur = redis.call('HGET', KEYS[1], 'turn')
if ARGV[1] == '0' then
  if cur then return 0 end
elseif not cur then return -1
elseif cur ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[1]) return 1 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'turn', ARGV[3], 'record', ARGV[4])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
"""KEYS[1] = the hash; ARGV = expected turn ('0': must not exist), expiry seconds ('0':
delete), the new turn, the record JSON. Returns 1 written, 0 stale, -1 gone."""


def key(conversation: str) -> str:
    return f"transcript:{{{conversation}}}"


class RedisStore:
    name = "redis"

    def __init__(self, url: str, client: Any = None) -> None:
        if client is None:
            try:
                import redis.asyncio as redis_asyncio
            except ImportError:  # pragma: no cover - the redis extra is not installed
                raise StoreUnavailableError(
                    "LLM transcript store unreachable - redis: the redis package is missing; "
                    "install the 'redis' extra"
                ) from None
            client = redis_asyncio.Redis.from_url(url, decode_responses=True)
        self.url = url
        self._client = client
        self._cas = client.register_script(CAS)

    async def read(self, conversation: str) -> Record | None:
        try:
            text = await self._client.hget(key(conversation), "record")
        except Exception as exc:  # redis raises its own hierarchy; all mean the same here
            raise StoreUnavailableError(
                f"LLM transcript store unreachable - redis: {exc}"
            ) from None
        return Record.from_json(text) if text else None

    async def write(
        self, conversation: str, expected_turn: int, record: Record | None, expire_s: int
    ) -> WriteOutcome:
        expire = expire_s if record is not None else 0
        args = [
            str(expected_turn),
            str(max(expire, 0)),
            str(record.turn if record is not None else 0),
            record.to_json() if record is not None else "",
        ]
        try:
            result = await self._cas(keys=[key(conversation)], args=args)
        except Exception as exc:
            raise StoreUnavailableError(
                f"LLM transcript store unreachable - redis: {exc}"
            ) from None
        if int(result) == 1:
            return WriteOutcome.WRITTEN
        return WriteOutcome.GONE if int(result) == -1 else WriteOutcome.STALE

    async def close(self) -> None:
        await self._client.aclose()
