"""The pages (GET): each gathers what it shows on the thread pool and renders one template."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response

from gregor.console import browse, charts
from gregor.console import groups as group_reads
from gregor.console.errors import NotFound
from gregor.console.web import cluster_of, console_of, render

# Kafka's legal topic names: anything else cannot name a topic
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def topic_name(request: Request) -> str:
    name = str(request.path_params["topic"])
    if not TOPIC_NAME.match(name):
        raise NotFound(f"{name[:80]!r} is not a topic name (letters, digits, '.', '_', '-')")
    return name


def _throughput_chart(request: Request) -> object:
    points = console_of(request).history.throughput()
    return charts.line_chart(
        [
            ("produced", [(t, p) for t, p, _ in points]),
            ("consumed", [(t, c) for t, _, c in points]),
        ],
        "msg/s",
        "messages per second produced and consumed",
    )


async def overview(request: Request) -> Response:
    console = console_of(request)
    data = await console.call(cluster_of(request).overview)
    points = console.history.throughput()
    rates = points[-1] if points else None
    return render(
        request, "overview.html", overview=data, rates=rates, chart=_throughput_chart(request)
    )


async def topics(request: Request) -> Response:
    console = console_of(request)
    internal = request.query_params.get("internal") == "1"
    rows = await console.call(cluster_of(request).topics, internal)
    return render(
        request, "topics.html", topics=rows, rates=console.history.topic_rates(), internal=internal
    )


async def topic(request: Request) -> Response:
    console = console_of(request)
    name = topic_name(request)
    row = await console.call(cluster_of(request).topic, name)
    configs = await console.call(cluster_of(request).topic_configs, name)
    chart = charts.line_chart(
        [("messages in", console.history.topic_throughput(name))], "msg/s",
        f"messages per second into {name}",
    )  # fmt: skip
    return render(
        request,
        "topic.html",
        topic=row,
        configs=configs,
        rate=console.history.topic_rates().get(name),
        chart=chart,
        saved=request.query_params.get("saved"),
    )


async def messages(request: Request) -> Response:
    console = console_of(request)
    name = topic_name(request)
    md = await console.call(cluster_of(request).metadata)
    t = md.topics.get(name)
    if t is None or not t.partitions:
        raise NotFound(f"there is no topic {name!r}")
    params = dict(request.query_params)
    query = browse.parse_query(params, len(t.partitions))
    page = await console.call(browse.read, cluster_of(request), name, len(t.partitions), query)
    produced = None
    if request.query_params.get("produced") and query.partition is not None:
        produced = (query.partition, query.offset)
    return render(
        request,
        "messages.html",
        topic=name,
        partitions=len(t.partitions),
        query=query,
        params=params,
        page=page,
        produced=produced,
    )


async def groups(request: Request) -> Response:
    console = console_of(request)
    rows = await console.call(group_reads.list_groups, cluster_of(request))
    lags = console.history.latest_lag()
    for r in rows:
        r.lag = lags.get(r.group_id)
    return render(request, "groups.html", groups=rows)


async def group(request: Request) -> Response:
    console = console_of(request)
    group_id = str(request.path_params["group"])
    detail = await console.call(group_reads.describe, cluster_of(request), group_id)
    series = [("total", console.history.lag(group_id))]
    for (topic, p), points in console.history.partition_lag(group_id, charts.SERIES - 1).items():
        series.append((f"{topic}-{p}", points))
    chart = charts.line_chart(series, "records", "lag over time: the total and per partition")
    return render(
        request,
        "group.html",
        group=detail,
        chart=chart,
        reset=request.query_params.get("reset"),
    )
