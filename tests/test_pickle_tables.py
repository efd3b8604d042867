"""A framework's harmless classes are its layout's, handed to the readers (issue 33, item 4).

The readers judge a pickle with the table of harmless classes they are handed (the layouts'
``harmless``, joined as ``layouts.HARMLESS``, passed down as ``NAMED_FILES`` is): a reader names
no framework, so one handed no table calls a framework's container what it is to a stranger,
CKD401. A framework's packages reach the user's ``trusted-globals`` the same way: a class of
theirs is trusted only where a pickle rebuilds it. Each file is written by the framework's own
class, and each verdict confirmed by torch's own loader or by running the pickle.
"""

from __future__ import annotations

import io
import pickle

import pytest

from ckptdoctor.layouts.registry import HARMLESS, LAYOUTS
from ckptdoctor.model import Problem
from ckptdoctor.readers.files import NO_HARMLESS, BytesSample, verify_sample

torch = pytest.importorskip("torch")
data = pytest.importorskip("lightning.fabric.utilities.data")

ATTRIBUTE_DICT = "lightning.fabric.utilities.data.AttributeDict"


def _hyper_parameters() -> bytes:
    """What Lightning's ``save_hyperparameters`` keeps and its checkpoints pickle: an ``AttributeDict``."""
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": data.AttributeDict(lr=0.1)}, buffer)
    return buffer.getvalue()


def test_a_framework_container_is_harmless_by_the_table_the_reader_is_handed() -> None:
    saved = _hyper_parameters()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(saved), weights_only=True)  # torch's default loader refuses it: a finding is due
    assert ATTRIBUTE_DICT in HARMLESS.classes and any(ATTRIBUTE_DICT in layout.harmless for layout in LAYOUTS)
    stranger = verify_sample(BytesSample(saved), "last.pt", harmless=NO_HARMLESS)
    assert {i.problem for i in stranger.issues} == {Problem.UNSAFE_PICKLE}
    handed = verify_sample(BytesSample(saved), "last.pt", harmless=HARMLESS)
    (issue,) = handed.issues
    assert issue.problem is Problem.NON_WEIGHTS and issue.needs == (ATTRIBUTE_DICT,)
    assert f"torch.serialization.safe_globals([{ATTRIBUTE_DICT}])" in issue.detail


def test_every_construct_only_class_is_a_harmless_class_of_the_same_layout() -> None:
    """A class harmless only when rebuilt is first harmless: else the reader would never see it called."""
    for layout in LAYOUTS:
        assert layout.construct_only <= layout.harmless, layout.name
    assert HARMLESS.construct_only <= HARMLESS.classes and HARMLESS.construct_only
