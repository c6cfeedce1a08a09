"""OrthoLab dashboard: the navigation frame shared by every page.

Start it with `ortholab dashboard` (see app/launch.py); `streamlit run app/main.py` works too, reading
the database named by $ORTHOLAB_DB. The sidebar holds the run selection every page shows.
"""

from __future__ import annotations

import streamlit as st

from ortholab.app import data, state
from ortholab.app.charts import image_format_control
from ortholab.db import StoreError

st.set_page_config(page_title="OrthoLab", page_icon=":material/blur_circular:", layout="wide")

try:
    reader = data.reader()
    runs = reader.runs()
except StoreError as error:
    st.error(str(error))
    st.stop()

page = st.navigation(
    [
        st.Page("views/runs.py", title="Runs", icon=":material/table_rows:", default=True),
        st.Page("views/curves.py", title="Curves", icon=":material/show_chart:"),
        st.Page("views/eigenvalues.py", title="Eigenvalues", icon=":material/blur_circular:"),
        st.Page("views/gradients.py", title="Gradients and states", icon=":material/gradient:", url_path="gradients"),
        st.Page("views/audio.py", title="Audio", icon=":material/graphic_eq:"),
        st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("views/papers.py", title="Papers", icon=":material/menu_book:"),
        st.Page("views/artifacts.py", title="Artifacts", icon=":material/category:"),
    ]
)
state.sidebar_selection(runs)
image_format_control()
copy = f" · a copy an export wrote ({reader.copied}): runs as they were then" if reader.copied else ""
st.sidebar.caption(f"Store: `{reader.display_url}` · {len(runs)} run{'s' * (len(runs) != 1)}{copy}")
page.run()
