"""Record batches (magic v2): header codec in `batch`, records in `records`, codecs in `compression`."""
