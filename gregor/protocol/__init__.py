"""Kafka's wire protocol, sans I/O: frames in, messages out, and back.

Layout
    schema/       our declarations of every request and response we serve, field by field and
                  version by version (one module per API; the language is in schema/dsl.py)
    codegen.py    declarations -> classes, and straight-line encode/decode source per version
    codec.py      the entry points below; caches of the generated functions
    messages.py   every message class by Kafka's name
    headers.py    request header v1/v2, response header v0/v1, and which goes with which
    framing.py    the int32 size prefix, socket.request.max.bytes, a sans-I/O frame splitter
    api_keys.py   the APIs and versions we serve (ApiVersions is built from it)
    exceptions.py CorruptFrameError, FrameTooLargeError, UnsupportedVersionError, EncodeError
    check.py      slow checks of a value against its schema (encode diagnostics, handler tests)
    errors.py     Kafka's error codes          records/   RecordBatch v2 (not decoded here)

Decoding a request (broker side)
    from gregor.protocol import codec
    header, request = codec.decode_request(frame)   # frame: bytes after the size prefix
    header.request_api_key, header.request_api_version, header.correlation_id, header.client_id
    request.topic_data[0].partition_data[0].records  # a memoryview slice of `frame`, no copy

  `UnsupportedVersionError` (carrying `.header`) is raised for an API or version outside
  `api_keys.SUPPORTED`, before the body is read; `headers.peek_request(frame)` gives
  (api_key, api_version, correlation_id) without decoding anything. `CorruptFrameError` is the
  only other exception: its message names the message, version, field path and offset.
  Trailing bytes after a body are ignored; unknown tagged fields are skipped.

Building and encoding a response
    from gregor.protocol.messages import ProduceResponse
    response = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[ProduceResponse.PartitionProduceResponse(
            index=0, error_code=0, base_offset=42)])])
    buffers = codec.encode_response(api_key, api_version, correlation_id, response)
    # -> [bytearray, records, bytearray, ...]: size prefix and header included; write them in
    #    order (writev/sendfile). codec.total_length(buffers) is the byte count.

  Classes: one per message (`ProduceRequest`, `ProduceResponse`, ...) with its structs as
  attributes (`ProduceResponse.PartitionProduceResponse`), also reachable by
  `codec.message_class(api_key, "response")` and `codec.struct_class(message, struct)`.
  Construction is by keyword; every field of every version is an attribute, and a field not
  given takes Kafka's default (declared `default`, else 0 / "" / False / [] / empty bytes /
  zero UUID / a struct of defaults; null for records). Fields a version does not carry are
  silently left out when encoding that version. Values: ints, bool, float, str, bytes,
  uuid.UUID, lists, struct instances; `records` may be bytes-like or any object with
  `__len__` (the runtime's FileSlice), which is put in the buffer list untouched.

  ApiVersions above our max version: answer with `codec.encode_api_versions_fallback(
  correlation_id)` (v0 format, response header v0, UNSUPPORTED_VERSION and our table).
  `codec.api_versions_body()` builds the normal body from `api_keys.SUPPORTED`.

Client side (tools, tests, inter-broker): `codec.encode_request(api_key, version,
correlation_id, client_id, body)` and `codec.decode_response(api_key, version, frame)`.

Performance: the per-version functions are generated on first use and cached;
`codec.compile_all()` generates all of them (about 0.3 s) and is what the broker calls at
start-up. `python bench/protocol_codec.py` measures the Produce and Fetch hot paths.
"""
