"""Oracles for the DBLP round tracker: the binomial closed form and a Gilbert-Elliott loss channel.

With i.i.d. loss p, a round of E packets closes without a NACK iff at most E - need packets are
lost: P = P(Binomial(E, p) <= E - need). Over n independent rounds the number closing without a
NACK is Binomial(n, P); ``acceptance`` gives the interval a measured fraction must fall in.
"""
import math
import random

__all__ = ["binom_pmf", "binom_cdf", "p_no_nack", "acceptance", "GilbertElliott"]


def binom_pmf(k, n, p):
    """P(Binomial(n, p) = k), computed in log space (exact edges for p = 0 or 1)."""
    if not 0 <= k <= n:
        return 0.0
    if p <= 0.0 or p >= 1.0:
        return float(k == (n if p >= 1.0 else 0))
    log = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
           + k * math.log(p) + (n - k) * math.log1p(-p))
    return math.exp(log)


def binom_cdf(k, n, p):
    """P(Binomial(n, p) <= k) as the sum of the smaller of the two tails (no cancellation)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if k < n * p:
        return math.fsum(binom_pmf(j, n, p) for j in range(k + 1))
    return 1.0 - math.fsum(binom_pmf(j, n, p) for j in range(k + 1, n + 1))


def p_no_nack(cnt, need, p):
    """P(a round of ``cnt`` packets, ``need`` required, closes without a NACK) at i.i.d. loss ``p``."""
    if not 1 <= need <= cnt:
        raise ValueError(f"need = {need}: must be in 1..cnt = {cnt}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p = {p}: must be in 0..1")
    return binom_cdf(cnt - need, cnt, p)


def acceptance(n, prob, alpha=1e-3):
    """(lo, hi) fractions with P(X/n < lo) <= alpha/2 and P(X/n > hi) <= alpha/2, X ~ Binomial(n, prob)."""
    if n < 1:
        raise ValueError(f"n = {n}: must be >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha = {alpha}: must be in (0, 1)")
    lo, total = 0, binom_pmf(0, n, prob)
    while total <= alpha / 2 and lo < n:        # largest lo with P(X < lo) <= alpha/2
        lo += 1
        total += binom_pmf(lo, n, prob)
    hi, total = n, binom_pmf(n, n, prob)
    while total <= alpha / 2 and hi > 0:        # smallest hi with P(X > hi) <= alpha/2
        hi -= 1
        total += binom_pmf(hi, n, prob)
    return lo / n, hi / n


class GilbertElliott:
    """Two-state burst-loss channel, seeded: Good -> Bad with ``p_gb``, Bad -> Good with ``p_bg``;
    a packet is lost with ``loss_good`` in Good and ``loss_bad`` in Bad. ``lost()`` draws one packet
    (the state moves after each packet)."""

    def __init__(self, p_gb, p_bg, loss_good=0.0, loss_bad=1.0, seed=0):
        for name, v in (("p_gb", p_gb), ("p_bg", p_bg), ("loss_good", loss_good), ("loss_bad", loss_bad)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} = {v}: must be in 0..1")
        if p_gb + p_bg == 0.0:
            raise ValueError("p_gb + p_bg must be > 0")
        self.p_gb, self.p_bg, self.loss_good, self.loss_bad = p_gb, p_bg, loss_good, loss_bad
        self.rng = random.Random(seed)
        self.bad = False

    @property
    def mean_loss(self):
        """Stationary loss rate: pi_bad * loss_bad + pi_good * loss_good."""
        bad = self.p_gb / (self.p_gb + self.p_bg)
        return bad * self.loss_bad + (1 - bad) * self.loss_good

    def lost(self):
        loss = self.rng.random() < (self.loss_bad if self.bad else self.loss_good)
        self.bad = self.rng.random() >= self.p_bg if self.bad else self.rng.random() < self.p_gb
        return loss
