"""AlterUserScramCredentials (key 51) v0: add, replace or remove users' SCRAM credentials.

v0 is flexible. An upsertion carries the salted password the client computed (PBKDF2 of the
password with the salt and iterations), never the password itself.
"""

from gregor.protocol.schema.dsl import api

ALTER_USER_SCRAM_CREDENTIALS = api(
    key=51,
    name="AlterUserScramCredentials",
    versions="0",
    flexible="0+",
    request="""
deletions: []ScramCredentialDeletion
  name: string
  mechanism: int8
upsertions: []ScramCredentialUpsertion
  name: string
  mechanism: int8
  iterations: int32
  salt: bytes
  salted_password: bytes
""",
    response="""
throttle_time_ms: int32
results: []AlterUserScramCredentialsResult
  user: string
  error_code: int16
  error_message: string nullable
""",
)
