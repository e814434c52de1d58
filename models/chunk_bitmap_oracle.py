"""SDR-RDMA oracles: real erasure decoders and the paper's closed forms (SPEC section 6, App. A/B).

Decoders work on chunks (equal-length byte strings): XOR parity by hand, MDS as Reed-Solomon over
GF(2^8) with ``reedsolo`` (one codeword of k+m symbols per byte position, a chunk = a symbol, lost
chunks = erasures). Probabilities: p is a chunk loss probability; failure probabilities are computed
as upper sums of the binomial tail (``1 - lower sum`` cancels in float64), and ``1 - (1 - f)**L`` as
``-expm1(L * log1p(-f))``.
"""
import math

import numpy as np
import reedsolo

__all__ = ["xor_encode", "xor_decode", "mds_encode", "mds_decode", "p_chunk", "binom_upper", "mds_fail",
           "xor_fail", "p_mds", "p_xor", "p_fallback", "sr_rto", "ec_timeout", "sr_mean_time"]


# --- decoders ------------------------------------------------------------------------------------

def _xor(chunks):
    out = bytearray(len(chunks[0]))
    for c in chunks:
        for i, b in enumerate(c):
            out[i] ^= b
    return bytes(out)


def xor_encode(data, m):
    """The k data chunks followed by m parity chunks, parity i = XOR of data j with j mod m = i."""
    return list(data) + [_xor([d for j, d in enumerate(data) if j % m == i]) for i in range(m)]


def xor_decode(received, k, m):
    """The k data chunks from ``received`` (k+m entries, None = lost), or None if some cannot be rebuilt."""
    data = list(received[:k])
    for i in range(m):
        members = [j for j in range(k) if j % m == i]
        lost = [j for j in members if data[j] is None]
        if not lost:
            continue
        if len(lost) > 1 or received[k + i] is None:
            return None
        data[lost[0]] = _xor([data[j] for j in members if j != lost[0]] + [received[k + i]])
    return data


def _codec(k, m):
    return reedsolo.RSCodec(nsym=m, nsize=k + m)


def mds_encode(data, m):
    """The k data chunks followed by m Reed-Solomon parity chunks (systematic, symbol-wise)."""
    k, size = len(data), len(data[0])
    codec = _codec(k, m)
    words = [codec.encode(bytes(d[b] for d in data)) for b in range(size)]
    return [bytes(w[j] for w in words) for j in range(k + m)]


def mds_decode(received, k, m):
    """The k data chunks from ``received`` (None = lost, an erasure), or None if the decoder fails."""
    codec = _codec(k, m)
    lost = [j for j, c in enumerate(received) if c is None]
    size = len(next(c for c in received if c is not None))
    out = [bytearray(size) for _ in range(k)]
    for b in range(size):
        word = bytearray(0 if c is None else c[b] for c in received)
        try:
            decoded = codec.decode(word, erase_pos=lost)[0]
        except reedsolo.ReedSolomonError:
            return None
        for j in range(k):
            out[j][b] = decoded[j]
    return [bytes(c) for c in out]


# --- closed forms (App. B) -----------------------------------------------------------------------

def p_chunk(p_drop, n):
    """Chunk loss probability of a chunk of ``n`` packets: 1 - (1 - P_drop)^N."""
    return -math.expm1(n * math.log1p(-p_drop)) if p_drop < 1 else 1.0


def binom_upper(n, j, p):
    """P(Binomial(n, p) >= j) as the upper sum."""
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(max(j, 0), n + 1))


def mds_fail(k, m, p):
    """Probability that a (k, m) MDS submessage loses more than m of its k+m chunks."""
    return binom_upper(k + m, m + 1, p)


def xor_fail(k, m, p):
    """Probability that some of the m XOR groups (n = k/m + 1 chunks each) loses two or more."""
    if k % m:
        raise ValueError(f"xor_fail: k = {k} must be a multiple of m = {m}")
    return -math.expm1(m * math.log1p(-binom_upper(k // m + 1, 2, p)))


def p_mds(k, m, p):
    """p_MDS(k, m) = sum_{i=0..m} C(k+m, i) p^i (1-p)^(k+m-i)."""
    return 1 - mds_fail(k, m, p)


def p_xor(k, m, p):
    """p_XOR(k, m) = [(1-p)^n + n p (1-p)^(n-1)]^m with n = k/m + 1."""
    return 1 - xor_fail(k, m, p)


def p_fallback(fail, submessages):
    """P_fallback = 1 - P_EC^L of a message of L submessages, each failing with probability ``fail``."""
    return -math.expm1(submessages * math.log1p(-fail)) if fail < 1 else 1.0


# --- Selective Repeat (App. A) -------------------------------------------------------------------

def sr_rto(rtt, alpha):
    """Per-chunk SR retransmission timeout RTT + alpha * RTT."""
    return rtt + alpha * rtt


def ec_timeout(rtt, alpha):
    """RTT + beta * RTT with beta = alpha / 2 (Sec. 4.1.2, as the SPEC gives it)."""
    return rtt + alpha / 2 * rtt


def sr_mean_time(chunks, t_inj, rto, rtt, p):
    """E[T_SR] = sum_{q>=1} {1 - prod_i [1 - P(X_i >= q)]} + RTT, integer time (injection units).

    Chunk i starts at s_i = i * t_inj; X_i = s_i + O (Y_i - 1), O = rto + t_inj, Y_i ~ Geometric(1 - p);
    P(X_i >= q) = 1 for q <= s_i and p^ceil((q - s_i) / O) above. The product is piecewise constant
    in q: it changes only where some chunk's exponent steps, so the sum runs over those events
    (chunks * rounds of them) instead of over every q.
    """
    for name, value in (("chunks", chunks), ("t_inj", t_inj), ("rto", rto)):
        if not isinstance(value, int) or value < (1 if name == "chunks" else 0):
            raise ValueError(f"sr_mean_time: {name} = {value!r} must be a non-negative integer (chunks >= 1)")
    if not 0 <= p < 1:
        raise ValueError(f"sr_mean_time: p = {p} must be in [0, 1)")
    o = rto + t_inj
    if o < 1:
        raise ValueError("sr_mean_time: rto + t_inj must be >= 1")
    s_max = (chunks - 1) * t_inj
    if p == 0:
        return s_max + rtt
    start = np.arange(chunks, dtype=np.int64) * t_inj
    c0 = -((start - (s_max + 1)) // o)                  # ceil((s_max + 1 - s_i) / O) >= 1
    rounds = max(1, math.ceil(math.log(1e-18 / chunks) / math.log(p)))
    logp = math.log(p)
    exps = c0[:, None] + np.arange(rounds + 1)[None, :]  # exponent of chunk i from its (j)-th event on
    terms = np.log1p(-np.exp(exps * logp))
    times = start[:, None] + 1 + exps[:, 1:] * o - o    # q at which exponent exps[:, j] -> exps[:, j+1]
    times = np.concatenate([times.ravel(), [s_max + 1]])
    deltas = np.concatenate([(terms[:, 1:] - terms[:, :-1]).ravel(), [0.0]])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    level = terms[:, 0].sum() + np.cumsum(deltas)       # log prod_i (1 - P(X_i >= q)) from times[n] on
    # Events before s_max + 1 cannot exist (c0 is the exponent at s_max + 1); the first time is s_max + 1.
    length = np.diff(times)
    tail = math.fsum((-np.expm1(level[:-1]) * length).tolist())
    return s_max + tail + rtt
