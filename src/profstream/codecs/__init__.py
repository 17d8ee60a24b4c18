"""Codecs: one module per raw record family, and the registry that finds them.

``CODECS`` maps a family name to its :class:`~profstream.codecs._base.Codec`;
:func:`codec_for_file` says which family owns a file name. Each module lists its
codecs in a module-level ``CODECS`` tuple; the registry below is the one place
that enumerates the modules.
"""

from __future__ import annotations

import functools
import re
from importlib import import_module
from types import MappingProxyType

from profstream.codecs._base import Codec, DecodeContext, Decoded, StreamTraits

__all__ = ["CODECS", "Codec", "DecodeContext", "Decoded", "StreamTraits", "codec_for_file", "get_codec"]

_MODULES = (
    "hwts",
    "stars_soc",
    "ffts_profile",
    "aicore",
    "ts_track",
    "training_trace",
    "lpm_freq",
    "npu_mem",
    "l2_cache",
    "hbm",
    "framework",
    "api_event",
    "compact",
    "additional",
    "dictionaries",
)

#: names that are never data: completion markers, analysis markers, archives.
NOT_DATA = re.compile(r".*\.(done|complete|zip)$")


def _load() -> dict[str, Codec]:
    found: dict[str, Codec] = {}
    for name in _MODULES:
        module = import_module(f"profstream.codecs.{name}")
        for codec in module.CODECS:
            if codec.family in found:
                msg = f"codec family {codec.family!r} is defined twice"
                raise AssertionError(msg)
            found[codec.family] = codec
    return found


CODECS = MappingProxyType(_load())


def get_codec(family: str) -> Codec:
    try:
        return CODECS[family]
    except KeyError:
        msg = f"unknown record family {family!r}; known: {', '.join(sorted(CODECS))}"
        raise KeyError(msg) from None


@functools.lru_cache(maxsize=1 << 16)
def codec_for_file(name: str, traits: StreamTraits | None = None) -> tuple[Codec, re.Match[str]] | None:
    """The codec owning file ``name`` (a base name) for a collection with ``traits``, or None.

    Cached: the daemon lists each followed directory every poll, and matching every name against
    every codec's pattern again had cost it 5 % of its pipeline's time at 50 MB/s.
    """
    if NOT_DATA.match(name):
        return None
    traits = traits or StreamTraits()
    for codec in CODECS.values():
        found = codec.matches(name)
        if found and codec.applies(traits):
            return codec, found
    return None
