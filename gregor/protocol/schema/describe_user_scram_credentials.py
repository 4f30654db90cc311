"""DescribeUserScramCredentials (key 50) v0: each user's SCRAM mechanisms and iterations.

v0 is flexible. `users` null or empty: every user with a credential. Never the salt or keys.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_USER_SCRAM_CREDENTIALS = api(
    key=50,
    name="DescribeUserScramCredentials",
    versions="0",
    flexible="0+",
    request="""
users: []UserName nullable
  name: string
""",
    response="""
throttle_time_ms: int32
error_code: int16
error_message: string nullable
results: []DescribeUserScramCredentialsResult
  user: string
  error_code: int16
  error_message: string nullable
  credential_infos: []CredentialInfo
    mechanism: int8     # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int32
""",
)
