"""DescribeUserScramCredentials v0 and AlterUserScramCredentials v0: SCRAM users (KIP-554).

Describe is answered from this node's metadata image (every broker has the credentials).
Alter is a metadata write: a broker in a quorum forwards it to the active controller (Envelope,
KIP-590), which turns it into UserScramCredentialRecord / RemoveUserScramCredentialRecord
(controller/scram_credentials.py has the rules) and answers once they are committed. Results
are one per user; the salted password in an upsertion is never logged or echoed.
"""

from __future__ import annotations

from typing import Any

from gregor.controller.scram_credentials import Deletion, Upsertion, describe
from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_after_commit, not_controller
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from gregor.security.acls import ALTER, DESCRIBE


@handles(api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    users = None if request.users is None else [u.name for u in request.users]
    R = DescribeUserScramCredentialsResponse
    if not ctx.authorize_cluster(DESCRIBE):  # as Kafka: DESCRIBE on the cluster
        message = "Request DescribeUserScramCredentials is not authorized."
        code = errors.CLUSTER_AUTHORIZATION_FAILED
        refused = [
            R.DescribeUserScramCredentialsResult(
                user=user, error_code=code, error_message=message, credential_infos=[]
            )
            for user in dict.fromkeys(users or [])
        ]  # as Kafka: the error for the whole request and for each user asked about
        return R(error_code=code, error_message=message, results=refused)
    results = [
        R.DescribeUserScramCredentialsResult(
            user=user,
            error_code=code,
            error_message=message if code else "",  # as Kafka: left at its default
            credential_infos=[
                R.CredentialInfo(mechanism=mech, iterations=iterations)
                for mech, iterations in infos
            ],
        )
        for user, code, message, infos in describe(ctx.services.store.image, users)
    ]
    return R(error_code=errors.NONE, error_message="", results=results)


@handles(api_keys.ALTER_USER_SCRAM_CREDENTIALS)
def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    deletions = [Deletion(d.name, d.mechanism) for d in request.deletions]
    upsertions = [
        Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        for u in request.upsertions
    ]
    refused = not_controller(ctx)
    before = services.store.last_appended
    outcome: list[tuple[str, int, str | None]]
    names = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
    if not ctx.authorize_cluster(ALTER):  # as Kafka: ALTER on the cluster
        message = "Request AlterUserScramCredentials is not authorized."
        outcome = [(name, errors.CLUSTER_AUTHORIZATION_FAILED, message) for name in names]
    elif refused is not None:
        outcome = [(name, refused.code, refused.message) for name in names]
    else:
        outcome = services.admin.alter_user_scram_credentials(deletions, upsertions)
    R = AlterUserScramCredentialsResponse
    results = [
        R.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user, code, message in outcome
    ]
    ok = [res for res in results if res.error_code == errors.NONE]
    return answer_after_commit(ctx, before, R(results=results), ok)
