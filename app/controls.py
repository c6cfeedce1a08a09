"""Page controls whose values survive whatever is selected, so widgets and charts never disagree.

Streamlit forgets a widget's value when a run of the page does not draw it (e.g. every run deselected: the
page stops early); the browser kept the old values and drew the charts with them while the widgets came
back at their defaults. Every keyed control here is built with persist_state="session", its first value is
put into st.session_state once (never passed again as a default, which Streamlit would apply anew), and a
multiselect's options always include what is chosen, so a value is never dropped behind the user's back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

PERSIST = "session"


def seed(key: str, default: Any) -> Any:
    """The control's value: `default` the first time in a session, else what the user left it at."""
    if key not in st.session_state:
        st.session_state[key] = default
    return st.session_state[key]


def multiselect(where, label: str, options: Sequence[Any], *, key: str, default: Sequence[Any] = (), **kwargs):
    chosen = list(seed(key, list(default)))
    return where.multiselect(label, list(dict.fromkeys([*options, *chosen])), key=key, persist_state=PERSIST, **kwargs)


def toggle(where, label: str, *, key: str, default: bool = False, **kwargs) -> bool:
    seed(key, default)
    return where.toggle(label, key=key, persist_state=PERSIST, **kwargs)


def slider(where, label: str, low: float, high: float, *, key: str, default: float, **kwargs) -> float:
    seed(key, default)
    return where.slider(label, low, high, key=key, persist_state=PERSIST, **kwargs)


def segmented(where, label: str, options: Sequence[Any], *, key: str, default: Any, **kwargs):
    seed(key, default)
    chosen = where.segmented_control(label, list(options), key=key, persist_state=PERSIST, **kwargs)
    return default if chosen is None else chosen  # a click on the chosen option clears it: keep the default


def selectbox(where, label: str, options: Sequence[Any], *, key: str, default: Any, **kwargs):
    options = list(options)
    value = seed(key, default)
    if value not in options:  # e.g. a run or metric no longer among the choices
        st.session_state[key] = value = default if default in options else options[0]
    return where.selectbox(label, options, key=key, persist_state=PERSIST, **kwargs)


def select_slider(where, label: str, options: Sequence[Any], *, key: str, default: Any, **kwargs):
    options = list(options)
    value = seed(key, default)
    if value not in options:
        st.session_state[key] = default if default in options else options[-1]
    return where.select_slider(label, options, key=key, persist_state=PERSIST, **kwargs)
