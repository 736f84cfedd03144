#!/usr/bin/env python3
"""dtrain_serving_client.py - classify a PNG with a model behind TF Serving's REST API.

The Python twin of `dtrain predict` (src/cli/cmd_predict.c), standard library only: it
decodes the PNG itself, converts and resizes it exactly as the C client does, asks the
server for the model's metadata, sends the image by :classify (or :predict) and prints the
same top-K lines ("Ankle boot  0.9731").

    /usr/bin/python3 python/dtrain_serving_client.py --host localhost --port 8501 \\
        --image examples/data/ankle_boot_t10k_0.png --model fashion [--signature_name predict]

As a module (python/ on sys.path):

    from dtrain_serving_client import read_png_gray, resize_gray, ServingClient
    w, h, px = read_png_gray("item.png")               # 8-bit gray, alpha on black
    top = ServingClient("localhost", 8501).classify_image("fashion", w, h, px)

PNG support: every colour type (gray, gray+alpha, RGB, RGBA, palette), bit depths 1 to 16,
tRNS transparency, Adam7 interlacing; chunk CRCs are checked. gAMA, cHRM and iCCP are
ignored: samples are taken as stored. Decoding is plain Python: fine for small images,
seconds for a photo of a few megapixels.

Conversion (the C client's src/data/png.c, bit for bit):
  16-bit samples -> 8 bits: (v * 255 + 32895) >> 16; 1/2/4-bit gray -> 8 bits: v * 255 / max.
  luma L = (19595 R + 38470 G + 7471 B + 32768) >> 16
  gray  = (L A + 127) // 255              (alpha composited on black: transparent = background)
  with --invert: 255 - (L A + 255 (255 - A) + 127) // 255   (dark items on light paper)
Resize: per axis, area averaging when shrinking, bilinear on pixel centres when enlarging,
rows first then columns, accumulated in doubles in the same order, rounded floor(v + 0.5).

Exit status: 0 done, 1 the image cannot be read or the server failed, 2 bad arguments.
"""

import argparse
import json
import math
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib

__all__ = ["PngError", "ServingError", "read_png_gray", "decode_png_gray", "resize_gray",
           "ServingClient", "format_top", "main"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 32768          # png-impl.h's DT__PNG_MAX_SIDE
MAX_PIXELS = 1 << 25      # DT__PNG_MAX_PIXELS

# Adam7: (x0, y0, dx, dy) of each pass.
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


class PngError(Exception):
    """The file is not a PNG, is corrupt or truncated, or cannot be read."""


class ServingError(Exception):
    """The server could not be reached or refused the request (status is the HTTP code)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# ---- PNG decoding ----

def _scale16(v):
    return (v * 255 + 32895) >> 16


def _luma(r, g, b):
    return (19595 * r + 38470 * g + 7471 * b + 32768) >> 16


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(raw, pos, width, height, bpp, rowbytes, name):
    """Undo the filters of one (sub-)image of `height` rows; returns (rows, new pos)."""
    rows = []
    prev = bytearray(rowbytes)
    for _ in range(height):
        if pos + 1 + rowbytes > len(raw):
            raise PngError("%s: corrupt PNG: Not enough image data" % name)
        ft = raw[pos]
        row = bytearray(raw[pos + 1:pos + 1 + rowbytes])
        pos += 1 + rowbytes
        if ft == 1:
            for i in range(bpp, rowbytes):
                row[i] = (row[i] + row[i - bpp]) & 0xFF
        elif ft == 2:
            for i in range(rowbytes):
                row[i] = (row[i] + prev[i]) & 0xFF
        elif ft == 3:
            for i in range(rowbytes):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ft == 4:
            for i in range(rowbytes):
                left = row[i - bpp] if i >= bpp else 0
                upleft = prev[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + _paeth(left, prev[i], upleft)) & 0xFF
        elif ft != 0:
            raise PngError("%s: corrupt PNG: bad adaptive filter value" % name)
        rows.append(row)
        prev = row
    return rows, pos


def _samples(row, width, channels, depth):
    """The row's samples as ints at their own depth."""
    n = width * channels
    if depth == 8:
        return list(row[:n])
    if depth == 16:
        return list(struct.unpack(">%dH" % n, bytes(row[:2 * n])))
    per = 8 // depth
    mask = (1 << depth) - 1
    out = []
    for i in range(n):
        byte = row[i // per]
        shift = 8 - depth * (i % per + 1)
        out.append((byte >> shift) & mask)
    return out


def decode_png_gray(data, name="image", invert=False):
    """Decode PNG bytes to (width, height, bytearray of 8-bit gray), row-major.

    Raises PngError naming `name` for a file that is not a PNG, is corrupt or truncated.
    """
    if data[:8] != PNG_SIGNATURE:
        if len(data) >= 4 and data[:4] == PNG_SIGNATURE[:4]:
            raise PngError("%s: not a PNG file (damaged signature)" % name)
        raise PngError("%s: not a PNG file (no PNG signature)" % name)
    pos = 8
    ihdr = None
    palette = None
    trns = None
    idat = []
    seen_idat = False
    truncated = False
    while True:
        if pos + 12 > len(data) or pos + 12 + struct.unpack(">I", data[pos:pos + 4])[0] > len(data):
            # libpng stops reading once it has every row: a file cut after its image data
            # still reads; cut earlier, it is truncated (checked once the data is inflated)
            if ihdr is None or not seen_idat:
                raise PngError("%s: truncated PNG: unexpected end of file" % name)
            truncated = True
            break
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        if length > 0x7FFFFFFF:
            raise PngError("%s: corrupt PNG: PNG unsigned integer out of range" % name)
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        pos += 12 + length
        tname = ctype.decode("latin-1")
        critical = not (ctype[0] & 0x20)
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            if critical:
                raise PngError("%s: corrupt PNG: %s: CRC error" % (name, tname))
            continue  # a damaged ancillary chunk is dropped, as libpng does
        if ihdr is None and ctype != b"IHDR":
            raise PngError("%s: corrupt PNG: Missing IHDR before %s" % (name, tname))
        if ctype == b"IHDR":
            if length != 13:
                raise PngError("%s: corrupt PNG: IHDR: invalid" % name)
            ihdr = struct.unpack(">IIBBBBB", body)
            w, h, depth, color, comp, filt, interlace = ihdr
            if w == 0 or h == 0 or w > 0x7FFFFFFF or h > 0x7FFFFFFF:
                raise PngError("%s: corrupt PNG: Invalid image size in IHDR" % name)
            if color not in CHANNELS or depth not in DEPTHS[color]:
                raise PngError("%s: corrupt PNG: Invalid bit depth or color type in IHDR"
                               % name)
            if comp != 0 or filt != 0 or interlace > 1:
                raise PngError("%s: corrupt PNG: Invalid compression, filter or interlace "
                               "method in IHDR" % name)
            if w > MAX_SIDE or h > MAX_SIDE or w * h > MAX_PIXELS:
                raise PngError("%s: image %d x %d is too large (at most %d pixels a side, %d "
                               "in all)" % (name, w, h, MAX_SIDE, MAX_PIXELS))
        elif ctype == b"PLTE":
            if length % 3 or length == 0 or length > 768:
                raise PngError("%s: corrupt PNG: PLTE: invalid" % name)
            palette = [tuple(body[i:i + 3]) for i in range(0, length, 3)]
        elif ctype == b"tRNS":
            trns = bytes(body)
        elif ctype == b"IDAT":
            if color == 3 and palette is None:
                raise PngError("%s: corrupt PNG: Missing PLTE before IDAT" % name)
            seen_idat = True
            idat.append(body)
        elif ctype == b"IEND":
            break
    w, h, depth, color, _, _, interlace = ihdr
    if not seen_idat:
        raise PngError("%s: corrupt PNG: Not enough image data" % name)
    channels = CHANNELS[color]
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    need = 0
    for x0, y0, dx, dy in passes:
        pw, ph = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
        if pw and ph:
            need += ph * (1 + (pw * channels * depth + 7) // 8)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(b"".join(idat), need)
    except zlib.error as e:
        raise PngError("%s: corrupt PNG: IDAT: %s" % (name, e)) from None
    if len(raw) < need:
        if truncated:
            raise PngError("%s: truncated PNG: unexpected end of file" % name)
        raise PngError("%s: corrupt PNG: Not enough image data" % name)

    bpp = max(1, channels * depth // 8)
    # transparency: per palette entry, or one gray / RGB colour at the image's own depth
    pal_alpha = None
    trans_color = None
    if trns is not None:
        if color == 3:
            pal_alpha = list(trns)
        elif color == 0 and len(trns) >= 2:
            trans_color = (struct.unpack(">H", trns[:2])[0],)
        elif color == 2 and len(trns) >= 6:
            trans_color = struct.unpack(">HHH", trns[:6])
    maxv = (1 << depth) - 1

    def to8(v):
        return _scale16(v) if depth == 16 else v if depth == 8 else v * 255 // maxv

    def pixel(s, i):
        """(luma, alpha) of pixel i of the sample list s, 8-bit."""
        if color == 0:
            v = s[i]
            a = 0 if trans_color is not None and v == trans_color[0] else 255
            return to8(v), a
        if color == 4:
            return to8(s[2 * i]), to8(s[2 * i + 1])
        if color == 2:
            r, g, b = s[3 * i], s[3 * i + 1], s[3 * i + 2]
            a = 0 if trans_color is not None and (r, g, b) == trans_color else 255
            return _luma(to8(r), to8(g), to8(b)), a
        if color == 6:
            r, g, b, a = s[4 * i:4 * i + 4]
            return _luma(to8(r), to8(g), to8(b)), to8(a)
        k = s[i]  # palette; an index past the palette is opaque black, as in libpng
        r, g, b = palette[k] if k < len(palette) else (0, 0, 0)
        a = pal_alpha[k] if pal_alpha is not None and k < len(pal_alpha) else 255
        return _luma(r, g, b), a

    def gray(lum, a):
        if invert:
            return 255 - (lum * a + 255 * (255 - a) + 127) // 255
        return (lum * a + 127) // 255

    out = bytearray(w * h)
    pos = 0
    for x0, y0, dx, dy in passes:
        pw = (w - x0 + dx - 1) // dx
        ph = (h - y0 + dy - 1) // dy
        if pw == 0 or ph == 0:
            continue
        rowbytes = (pw * channels * depth + 7) // 8
        rows, pos = _unfilter(raw, pos, pw, ph, bpp, rowbytes, name)
        for j, row in enumerate(rows):
            s = _samples(row, pw, channels, depth)
            y = y0 + j * dy
            for i in range(pw):
                out[y * w + x0 + i * dx] = gray(*pixel(s, i))
    return w, h, out


def read_png_gray(path, invert=False):
    """Read a PNG file as (width, height, bytearray of 8-bit gray). Raises PngError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PngError("%s: %s" % (path, e.strerror or e)) from None
    return decode_png_gray(data, path, invert)


# ---- resizing ----

def _axis_taps(sn, dn):
    """Per output sample: (first source sample, weights), as png.c's taps_make."""
    taps = []
    for x in range(dn):
        if dn == sn:
            taps.append((x, (1.0,)))
        elif dn < sn:
            lo, hi = x * sn, x * sn + sn
            j0, j1 = lo // dn, (hi - 1) // dn
            taps.append((j0, tuple((min(hi, (j + 1) * dn) - max(lo, j * dn)) / sn
                                   for j in range(j0, j1 + 1))))
        else:
            num, den = (2 * x + 1) * sn - dn, 2 * dn
            if num <= 0:
                taps.append((0, (1.0,)))
                continue
            j0, rem = divmod(num, den)
            if j0 >= sn - 1:
                taps.append((sn - 1, (1.0,)))
            elif rem == 0:
                taps.append((j0, (1.0,)))
            else:
                taps.append((j0, ((den - rem) / den, rem / den)))
    return taps


def resize_gray(src, sw, sh, dw, dh):
    """Resize 8-bit gray src (sw x sh) to dw x dh: area averaging when shrinking, bilinear
    when enlarging, each axis on its own; the same bytes as the C client's."""
    if min(sw, sh, dw, dh) < 1:
        raise ValueError("cannot resize %d x %d to %d x %d" % (sw, sh, dw, dh))
    tx, ty = _axis_taps(sw, dw), _axis_taps(sh, dh)
    tmp = []
    for y in range(sh):
        row = src[y * sw:(y + 1) * sw]
        for first, ws in tx:
            acc = 0.0
            for t, wt in enumerate(ws):
                acc += wt * row[first + t]
            tmp.append(acc)
    out = bytearray(dw * dh)
    for y, (first, ws) in enumerate(ty):
        for x in range(dw):
            acc = 0.0
            for t, wt in enumerate(ws):
                acc += wt * tmp[(first + t) * dw + x]
            v = math.floor(acc + 0.5)
            out[y * dw + x] = 0 if v < 0 else 255 if v > 255 else v
    return out


# ---- the server ----

def _dim_size(dim):
    s = dim.get("size") if isinstance(dim, dict) else None
    if isinstance(s, bool):
        return None
    if isinstance(s, int):
        return s
    try:
        return int(s) if isinstance(s, str) else None
    except ValueError:
        return None


def _image_of(sig):
    """(input name, rank, h, w, c) when the signature's one input is an image, else None."""
    inputs = sig.get("inputs") if isinstance(sig, dict) else None
    if not isinstance(inputs, dict) or len(inputs) != 1:
        return None
    (name, t), = inputs.items()
    dims = ((t or {}).get("tensor_shape") or {}).get("dim") or []
    if not isinstance(dims, list) or not 2 <= len(dims) <= 4:
        return None
    d = [_dim_size(x) for x in dims]
    if any(v is None for v in d) or d[0] not in (-1, 1):
        return None
    if any(v < 1 or v > MAX_SIDE for v in d[1:]):
        return None
    if len(d) == 2:
        s = math.isqrt(d[1])
        return (name, 2, s, s, 1) if s * s == d[1] and s >= 8 else None
    c = d[3] if len(d) == 4 else 1
    return (name, len(d), d[1], d[2], c) if c in (1, 3) else None


def _describe_inputs(sig):
    parts = []
    for name, t in ((sig or {}).get("inputs") or {}).items():
        dims = ((t or {}).get("tensor_shape") or {}).get("dim") or []
        parts.append("%s [%s]" % (name, ", ".join(str(_dim_size(x) or 0) for x in dims)))
    return ", ".join(parts) or "none"


def _method_kind(sig):
    m = sig.get("method_name")
    if not isinstance(m, str):
        return "predict"
    if m.endswith("/classify"):
        return "classify"
    if m.endswith("/predict"):
        return "predict"
    return None


class ServingClient:
    """A client of one TF-Serving-compatible REST server (http://host:port)."""

    def __init__(self, host="localhost", port=8501, timeout=30.0, base_url=None):
        self.base = (base_url or "http://%s:%d" % (host, port)).rstrip("/")
        self.timeout = timeout
        # the server is named explicitly: no proxy, whatever http_proxy says (as dtrain predict)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _call(self, method, path, body=None):
        url = self.base + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                msg = json.loads(raw).get("error")
            except (ValueError, AttributeError):
                msg = None
            if not isinstance(msg, str):
                msg = raw[:200].decode("utf-8", "replace")
                msg = "".join(" " if ord(ch) < 0x20 else ch for ch in msg)
            raise ServingError("%s %s: HTTP %d%s%s" % (method, url, e.code, ": " if msg else "",
                                                        msg), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServingError("%s: %s" % (url, reason)) from None
        try:
            ans = json.loads(text)
        except ValueError as e:
            raise ServingError("%s %s: the answer is not a JSON object: %s" % (method, url, e))
        if not isinstance(ans, dict):
            raise ServingError("%s %s: the answer is not a JSON object" % (method, url))
        return ans

    @staticmethod
    def _prefix(model, version):
        p = "/v1/models/" + urllib.parse.quote(model, safe="-_.~")
        return p + ("/versions/%d" % version if version is not None else "")

    def metadata(self, model, version=None):
        return self._call("GET", self._prefix(model, version) + "/metadata")

    def classify_image(self, model, w, h, px, version=None, signature_name=None):
        """Send one 8-bit gray image (any size; resized to the model's input) and return
        [(label, score), ...] in class order."""
        path = self._prefix(model, version) + "/metadata"
        meta = self._call("GET", path)
        sigs = ((meta.get("metadata") or {}).get("signature_def") or {}).get("signature_def")
        if not isinstance(sigs, dict):
            raise ServingError("GET %s%s: no metadata.signature_def.signature_def in the answer"
                               % (self.base, path))
        sig_name = signature_name
        if sig_name is None:
            cl = sigs.get("classify")
            sig_name = ("classify" if isinstance(cl, dict) and _method_kind(cl) == "classify"
                        else "serving_default")
        sig = sigs.get(sig_name)
        if not isinstance(sig, dict):
            raise ServingError("model %s has no signature '%s' (it has: %s)"
                               % (model, sig_name, ", ".join(sigs) or "none"))
        kind = _method_kind(sig)
        if kind is None:
            raise ServingError("signature '%s' of model %s is a %s signature: only classify "
                               "and predict are supported" % (sig_name, model,
                                                              sig.get("method_name")))
        image = None
        for name in [sig_name, "serving_default", "predict"] + list(sigs):
            image = _image_of(sigs.get(name))
            if image:
                break
        if not image:
            raise ServingError("model %s takes no image (signature '%s' inputs: %s; expected "
                               "[-1, H, W, C] with C 1 or 3, [-1, H, W] or [-1, S*S] with "
                               "S >= 8)" % (model, sig_name, _describe_inputs(sig)))
        in_name, rank, ih, iw, ic = image
        small = resize_gray(px, w, h, iw, ih)
        if kind == "classify" or rank == 2:
            sample = [float(v) for v in small for _ in range(ic)]
        elif rank == 3:
            sample = [[float(v) for v in small[y * iw:(y + 1) * iw]] for y in range(ih)]
        else:
            sample = [[[float(v)] * ic for v in small[y * iw:(y + 1) * iw]] for y in range(ih)]
        body = {"signature_name": sig_name}
        if kind == "classify":
            body["examples"] = [{in_name: sample}]
        else:
            body["instances"] = [sample]
        path = self._prefix(model, version) + ":" + kind
        ans = self._call("POST", path, body)
        return _parse_scores(ans, kind, sig, "POST %s%s" % (self.base, path))


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _parse_scores(ans, kind, sig, where):
    if kind == "classify":
        res = ans.get("results")
        lst = res[0] if isinstance(res, list) and res else None
        if not isinstance(lst, list):
            raise ServingError('%s: no "results" list in the answer' % where)
    else:
        pred = ans.get("predictions")
        lst = pred[0] if isinstance(pred, list) and pred else None
        if isinstance(lst, dict):
            outs = list((sig.get("outputs") or {}).keys())
            lst = lst.get("probabilities", lst.get(outs[0]) if outs else None)
        if not isinstance(lst, list):
            raise ServingError('%s: no "predictions" list in the answer' % where)
    if not lst:
        raise ServingError("%s: the answer has no classes" % where)
    scores = []
    for i, e in enumerate(lst):
        if kind == "classify":
            if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)):
                raise ServingError("%s: a result is not a [label, score] pair" % where)
            label, score = e
            if not _is_number(score):
                raise ServingError("%s: a score is not a number" % where)
        else:
            label, score = str(i), e
            if not _is_number(score):
                raise ServingError("%s: a prediction is not a list of numbers" % where)
        scores.append((label, float(score)))
    return scores


def format_top(scores, k):
    """The top-k lines, best first (ties in class order), labels padded to one width."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i][1], i))[:k]
    width = max(len(scores[i][0]) for i in order)
    return ["%s%s  %.4f" % (scores[i][0], " " * (width - len(scores[i][0])), scores[i][1])
            for i in order]


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="dtrain_serving_client.py",
        description="Classify a PNG with a model served over TensorFlow Serving's REST API "
                    "(dtrain serve, TF Serving) and print the top classes.")
    ap.add_argument("--host", default="localhost", help="the server's host (default localhost)")
    ap.add_argument("--port", type=int, default=8501, help="its REST port (default 8501)")
    ap.add_argument("--image", required=True, help="a PNG file (any colour type)")
    ap.add_argument("--model", required=True, help="the model's name on the server")
    ap.add_argument("--signature_name", default=None,
                    help="the signature to call (default: classify when the model has one, "
                         "else serving_default)")
    ap.add_argument("--version", type=int, default=None, help="that version of the model")
    ap.add_argument("--top", type=int, default=3, help="print the K best classes (default 3)")
    ap.add_argument("--invert", action="store_true",
                    help="the image is dark on light: composite on white, then invert")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error("--top: expected an integer >= 1")
    if args.version is not None and args.version < 0:
        ap.error("--version: expected a non-negative integer")
    prog = "dtrain_serving_client.py"
    try:
        w, h, px = read_png_gray(args.image, args.invert)
        client = ServingClient(args.host, args.port, timeout=args.timeout)
        scores = client.classify_image(args.model, w, h, px, version=args.version,
                                       signature_name=args.signature_name)
    except (PngError, ServingError) as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
    for line in format_top(scores, args.top):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
