"""The protobuf wire format, as far as the tests need it to read and edit SentencePiece .model files field by field
(tokenizer_check.py, fast_check.py): varints, a message's (field, wire type, value) triples, one field's encoding."""


def varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7f) | (0x80 if v > 0x7f else 0))
        v >>= 7
        if not v:
            return bytes(out)


def read_varint(b, i):
    v = sh = 0
    while True:
        v |= (b[i] & 0x7f) << sh
        i, sh = i + 1, sh + 7
        if b[i - 1] < 0x80:
            return v, i


def fields(b):
    """(field, wire type, value) of one message: an int for varints, the raw bytes otherwise."""
    i = 0
    while i < len(b):
        key, i = read_varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(b, i)
        elif wt == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def enc(f, wt, v):
    return varint(f << 3 | wt) + (varint(v) if wt == 0 else varint(len(v)) + v if wt == 2 else v)
