"""ApiVersions v0-4: the APIs and versions this broker serves, from the handler table.

v1: throttle_time_ms. v3: flexible; client_software_name/version (KIP-511); supported and
finalized features as tagged fields (we send none: no tagged field is written when empty, which
old librdkafka (2.0.x) needs). A request above v4 is answered by the dispatcher in v0 format
with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import re
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles, served
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import ApiVersionsResponse

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def response(error_code: int = errors.NONE) -> Any:
    row = ApiVersionsResponse.ApiVersion
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            row(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in served()
        ],
    )


@handles(api_keys.API_VERSIONS)
def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 3:
        name, version = request.client_software_name, request.client_software_version
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(version or "")):
            return response(errors.INVALID_REQUEST)
        ctx.connection["client_software"] = f"{name}/{version}"
    return response()
