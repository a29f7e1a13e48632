"""The training losses of ``torchtitan.components.loss`` as its trainer calls them.

* ``cross_entropy`` — ``compute_logprobs(logits, labels)`` negated: the per-token log-probabilities its RL losses
  use (``logits.float()`` once, then ``F.cross_entropy(reduction="none", ignore_index=IGNORE_INDEX)``), (B, L) with
  B = 1. The negation is exact.
* ``cross_entropy_mean`` — ``CrossEntropyLoss`` (``cross_entropy_loss``: ``F.cross_entropy`` of ``pred.float()``
  with ``reduction="sum"``) divided by ``global_valid_tokens``, which the trainer counts as
  ``(labels != IGNORE_INDEX).sum()`` (``Trainer.train_step``), as one batch of one sequence.
* ``linear_cross_entropy`` (mean) — ``ChunkedLossWrapper`` with the LM head a ``Linear`` of the suite's weight and
  bias (``Linear.Config(bias=True)``): the hidden states (1, N, H) split into ``num_chunks`` pieces along the
  sequence (the wrapper's default 8, or the largest divisor of N below it: it requires N divisible by the count),
  each chunk's logits through the head and ``CrossEntropyLoss``, backpropagated inside the call; the returned loss
  carries the accumulated gradient of the hidden states (``_DecoderOutputGradientBackProp``).

torchtitan's ignored label is the constant ``IGNORE_INDEX`` (−100): where the suite's targets equal its
``ignore_index`` the adapter writes −100, as torchtitan's data loaders mark the tokens without a target. Every loss
is float32; it is returned in the input dtype (one rounding).
"""

from __future__ import annotations

import torch
from torchtitan.components.loss import IGNORE_INDEX, ChunkedLossWrapper, CrossEntropyLoss, compute_logprobs
from torchtitan.models.common.linear import Linear

#: ``ChunkedLossWrapper.Config.num_chunks``'s default
NUM_CHUNKS = 8


def labels(targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The targets with torchtitan's ``IGNORE_INDEX`` where the suite's ``ignore_index`` marks a token, (1, N)."""
    return torch.where(targets == ignore_index, IGNORE_INDEX, targets)[None, :]


def valid_tokens(label: torch.Tensor) -> torch.Tensor:
    """``global_valid_tokens`` as ``Trainer.train_step`` counts it on one rank."""
    return (label != IGNORE_INDEX).sum()


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logprobs = compute_logprobs(logits[None], targets[None])
    assert isinstance(logprobs, torch.Tensor)
    return (-logprobs[0]).to(logits.dtype)


def cross_entropy_mean(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    label = labels(targets, ignore_index)
    loss, _ = CrossEntropyLoss(CrossEntropyLoss.Config())(logits[None], label, valid_tokens(label))
    return loss.to(logits.dtype)


def chunks(n: int) -> int:
    """The wrapper's chunk count for a sequence of n tokens: its default, or the largest divisor of n below it."""
    return max(c for c in range(1, NUM_CHUNKS + 1) if n % c == 0)


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """The LM head and its loss through ``ChunkedLossWrapper`` (module docstring). The head is a torchtitan ``Linear``
    whose weight and bias are the suite's tensors themselves (its parameters replaced, as ``functional_call`` would
    hand them in): the backward the wrapper runs inside its call reaches them."""
    if reduction != "mean":
        raise NotImplementedError("torchtitan's ChunkedLossWrapper returns the mean over the valid tokens only")
    v, h = weight.shape
    with torch.device("meta"):
        head = Linear.Config(in_features=h, out_features=v, bias=True).build()
    del head.weight, head.bias
    head.weight, head.bias = weight, bias
    wrapper = ChunkedLossWrapper(ChunkedLossWrapper.Config(num_chunks=chunks(x.shape[0])))
    wrapper.set_lm_head(head)
    label = labels(targets, ignore_index)
    loss, _ = wrapper(x[None], label, valid_tokens(label))
    return loss.to(x.dtype)
