"""What a :class:`~tfdp.input.DistributedInput` is configured with, checked against its world.

This module owns the input's configuration: the batch size per replica (from
``batch_size`` or ``global_batch_size``), the sampler a spec names (a name, a
template :class:`~tfdp.Sampler`, or a factory), checked against the source's
size and the strategy's replica count, and the sampler a streaming source is
indexed with. Each refusal is a :class:`tfdp.errors.ConfigError` naming its
argument. NumPy only.

Example:
    >>> resolve_batch_size(None, 32, num_replicas=4)
    8
    >>> resolve_sampler("eval", 10, {}, num_replicas=2, batch_size=4, seed=0).multiple_of
    4
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tfdp.errors import ConfigError
from tfdp.samplers import DistributedEvalSampler, DistributedSampler, RepeatAugSampler, Sampler

#: What ``DistributedInput(sampler=...)`` takes: a name, a template sampler, or a factory
#: ``(num_examples, num_replicas, rank) -> Sampler``.
SamplerSpec = str | Sampler | Callable[[int, int, int], Sampler]
#: The samplers a name gives.
SAMPLER_NAMES: dict[str, type[Sampler]] = {
    "distributed": DistributedSampler,
    "repeat_aug": RepeatAugSampler,
    "repeat-aug": RepeatAugSampler,  # the CLI's spelling, accepted here too
    "eval": DistributedEvalSampler,
}


@runtime_checkable
class _ShufflingSampler(Protocol):
    """A sampler with a ``shuffle`` option, which a streaming source needs (it shuffles)."""

    shuffle: bool


def resolve_batch_size(
    batch_size: int | None, global_batch_size: int | None, *, num_replicas: int
) -> int:
    """The batch size per replica from exactly one of ``batch_size`` or ``global_batch_size``.

    Example:
        >>> resolve_batch_size(5, None, num_replicas=2)
        5
    """
    if (batch_size is None) == (global_batch_size is None):
        raise ConfigError(
            "pass exactly one of batch_size (per replica) or global_batch_size",
            argument="batch_size",
        )
    if global_batch_size is not None:
        g = int(global_batch_size)
        if g < 1 or g % num_replicas:
            raise ConfigError(
                f"{global_batch_size} must be a positive multiple of the "
                f"{num_replicas} replicas in sync",
                argument="global_batch_size",
            )
        return g // num_replicas
    if isinstance(batch_size, bool) or int(batch_size) < 1:  # type: ignore[arg-type]
        raise ConfigError(
            f"must be an integer >= 1 per replica, got {batch_size!r}",
            argument="batch_size",
        )
    return int(batch_size)  # type: ignore[arg-type]


def resolve_sampler(
    spec: SamplerSpec,
    n: int,
    options: dict[str, Any],
    *,
    num_replicas: int,
    batch_size: int,
    seed: int,
    streaming: bool = False,
) -> Sampler:
    """The rank-0 sampler ``spec`` names for ``n`` examples on ``num_replicas`` replicas.

    A named sampler gets ``options`` (and ``seed``; the evaluation sampler
    pads to a multiple of ``batch_size``); a template or a factory's sampler
    must match ``n`` and ``num_replicas``; replicas step together, so ranks
    must be even.

    Example:
        >>> resolve_sampler("distributed", 8, {"shuffle": False}, num_replicas=2,
        ...                 batch_size=2, seed=0).indices().tolist()
        [0, 2, 4, 6]
    """
    w = num_replicas
    if isinstance(spec, Sampler):
        sampler = spec
    elif isinstance(spec, str):
        cls = SAMPLER_NAMES.get(spec)
        if cls is None:
            raise ConfigError(
                f"must be one of {sorted(SAMPLER_NAMES)}, a tfdp Sampler or a "
                f"factory, got {spec!r}",
                argument="sampler",
            )
        if cls is DistributedEvalSampler:
            options.setdefault("multiple_of", batch_size)
        else:
            options.setdefault("seed", seed)
        sampler = cls(n, w, 0, **options)
    elif callable(spec):
        sampler = spec(n, w, 0)
        if not isinstance(sampler, Sampler):
            raise ConfigError(
                f"the factory must return a tfdp Sampler, got {type(sampler).__name__}",
                argument="sampler",
            )
    else:
        raise ConfigError(
            f"must be a name, a tfdp Sampler or a factory, got {spec!r}",
            argument="sampler",
        )
    if sampler.num_replicas != w:
        raise ConfigError(
            f"has num_replicas={sampler.num_replicas} but the strategy has "
            f"{w} replicas in sync; build the sampler with num_replicas={w}",
            argument="sampler",
        )
    if sampler.num_examples != n:
        has = (
            f"the stream holds {n} records per epoch (source.stream_length({w}))"
            if streaming
            else f"the source has {n}"
        )
        raise ConfigError(f"has num_examples={sampler.num_examples} but {has}", argument="sampler")
    if (
        isinstance(sampler, DistributedSampler)
        and sampler.padding is None
        and not (sampler.drop_last or n % w == 0)
    ):
        raise ConfigError(
            "DistributedSampler(padding=None) leaves ranks uneven, but replicas step "
            "together; use padding='wrap' or 'random', drop_last=True, or sampler='eval'",
            argument="sampler",
        )
    return sampler


def stream_index_sampler(sampler: Sampler) -> Sampler:
    """The sampler that picks stream indices: ``sampler`` with the identity permutation.

    On a stream the shuffle is done by the source (files and blocks), so the
    sampler's own permutation is replaced by the identity; everything else
    (padding, repeats, selection) is the sampler's arithmetic.

    Example:
        >>> stream_index_sampler(DistributedSampler(6, 2, 0)).indices().tolist()
        [0, 2, 4]
    """
    if isinstance(sampler, DistributedEvalSampler):
        raise ConfigError(
            "'eval' needs a random-access source (exact evaluation pads and "
            "masks by index); convert the TFRecord files with tfdp.sources.write_tfrecords"
            " to arrays or an image folder, or evaluate with sampler='distributed'",
            argument="sampler",
        )
    if sampler.permutation is not None:
        raise ConfigError(
            "a sampler's permutation= orders examples by index, which a streaming "
            "source cannot read; a stream is shuffled by the source (files and blocks, with "
            "shuffle=True): drop permutation=, or use a random-access source",
            argument="sampler",
        )
    if not isinstance(sampler, _ShufflingSampler):
        raise ConfigError(
            f"{type(sampler).__name__} has no shuffle option, which a streaming "
            "source needs (the source shuffles, the sampler picks stream positions); use "
            "DistributedSampler or RepeatAugSampler",
            argument="sampler",
        )
    return sampler.replace(shuffle=False)


def same_stream_indices_every_epoch(sampler: Sampler) -> bool:
    """Whether a sampler with the identity permutation gives one rank the same list every epoch.

    True for the built-in samplers except random padding that draws extra
    indices (more padding than examples): those draws change with the epoch.

    Example:
        >>> same_stream_indices_every_epoch(DistributedSampler(3, 8, 0, padding="random"))
        False
    """
    if isinstance(sampler, RepeatAugSampler):
        return True
    if isinstance(sampler, DistributedSampler):
        extra = sampler.total_size - sampler.num_examples
        return not (
            sampler.padding == "random" and not sampler.drop_last and extra >= sampler.num_examples
        )
    return False
