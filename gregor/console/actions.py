"""The writes (POST, only when the console is not read-only): produce a record, set or delete
a topic config, reset an empty group's offsets. Each answers with a redirect (303) to the page
that shows the result."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gregor.console import groups
from gregor.console.browse import LONG_MAX
from gregor.console.errors import BadInput, NotFound
from gregor.console.pages import topic_name
from gregor.console.web import cluster_of, console_of, form_of


def _headers(text: str) -> list[tuple[str, bytes]]:
    """`name: value` lines (or `name=value`) as record headers."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        sep = ":" if ":" in line else "="
        name, found, value = line.partition(sep)
        if not found or not name.strip():
            raise BadInput(f"a header line is `name: value`, not {line[:60]!r}")
        out.append((name.strip(), value.strip().encode("utf-8")))
    return out


async def produce(request: Request) -> Response:
    console = console_of(request)
    name = topic_name(request)
    form = await form_of(request)
    md = await console.call(cluster_of(request).metadata)
    t = md.topics.get(name)
    if t is None or not t.partitions:
        raise NotFound(f"there is no topic {name!r}")
    raw = form.get("partition", "").strip()
    partition = None
    if raw not in ("", "any"):
        if not raw.isdigit() or int(raw) >= len(t.partitions):
            raise BadInput(
                f"partition {raw[:20]!r} does not exist: the topic has partitions 0 to {len(t.partitions) - 1}"
            )
        partition = int(raw)
    key = form.get("key", "").encode("utf-8") or None
    value = form.get("value", "").encode("utf-8") if "null_value" not in form else None
    headers = _headers(form.get("headers", ""))
    p, offset = await console.call(
        cluster_of(request).produce, name, partition, key, value, headers
    )
    query = urlencode({"mode": "offset", "partition": p, "offset": offset, "produced": 1})
    return RedirectResponse(f"/topics/{name}/messages?{query}", status_code=303)


async def set_config(request: Request) -> Response:
    console = console_of(request)
    name = topic_name(request)
    form = await form_of(request)
    key = form.get("name", "").strip()
    if not key:
        raise BadInput("a config needs a name")
    value = None if form.get("action") == "delete" else form.get("value", "")
    await console.call(cluster_of(request).set_topic_config, name, key, value)
    return RedirectResponse(f"/topics/{name}?{urlencode({'saved': key})}", status_code=303)


async def reset_offsets(request: Request) -> Response:
    console = console_of(request)
    group_id = str(request.path_params["group"])
    form = await form_of(request)
    target = form.get("target", "")
    topic = form.get("topic", "").strip() or None
    raw = form.get("offset", "").strip()
    offset = None
    if target == "offset":
        if not raw.isdigit() or int(raw) > LONG_MAX:
            raise BadInput(f"the offset must be a whole number from 0, not {raw[:20]!r}")
        offset = int(raw)
    await console.call(groups.reset, cluster_of(request), group_id, topic, target, offset)
    return RedirectResponse(f"/groups/{quote(group_id, safe='')}?reset={target}", status_code=303)
