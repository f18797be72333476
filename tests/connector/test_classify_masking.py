"""The destination's error text is masked before it is cut, so no piece of a secret survives the cut."""

from __future__ import annotations

import httpx
import pytest

from connector.delivery import classify
from connector.http1.decoding import Answer
from hifi import redaction
from hifi.errors import DestinationRejected


def test_a_token_at_the_cut_leaves_no_piece_behind() -> None:
    """A body whose token starts just before the 120-character cut shows none of the token."""
    token = "q8Zr3Vb7Kp2Lm9Xt4Wc6Hd1Jf5Ng0Ys8Ue3Ri7Ao"
    redaction.register(redaction.header_secrets(f"Bearer {token}"))
    for before in range(105, 121):
        response = httpx.Response(400, text="x" * before + token)
        with pytest.raises(DestinationRejected) as caught:
            classify(Answer.of_response(response))
        text = str(caught.value)
        assert not any(token[i : i + 4] in text for i in range(len(token) - 3)), (before, text)
