"""The sign-in pages of `gregor console --login`: the form, signing in (a session cookie) and
signing out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gregor.console import login
from gregor.console.web import console_of, form_of, render


async def form(request: Request) -> Response:
    return render(request, "login.html", mechanisms=login.MECHANISMS)


async def sign_in(request: Request) -> Response:
    console = console_of(request)
    if not console.settings.login:
        return RedirectResponse("/", status_code=303)
    fields = await form_of(request, write=False)
    user = fields.get("user", "").strip()
    cluster = await console.call(
        login.sign_in, console.settings, user, fields.get("password", ""),
        fields.get("mechanism", "PLAIN"),
    )  # fmt: skip
    session_id, dropped = console.sessions.add(user, cluster)
    for old in dropped:
        await console.call(old.close)
    answer = RedirectResponse("/", status_code=303)
    answer.set_cookie(
        login.COOKIE, session_id, httponly=True, samesite="strict", max_age=int(login.IDLE_S)
    )
    return answer


async def sign_out(request: Request) -> Response:
    console = console_of(request)
    await form_of(request, write=False)
    cluster = console.sessions.remove(request.cookies.get(login.COOKIE))
    if cluster is not None:
        await console.call(cluster.close)
    answer = RedirectResponse("/login", status_code=303)
    answer.delete_cookie(login.COOKIE)
    return answer
