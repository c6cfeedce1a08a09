"""Tables whose text is never cut: column widths for st.dataframe from what the columns hold, long text wrapped
over a few lines where the page is short of room; and the browser's check that no table on a page cuts a header
or a cell (tests/test_dashboard_browser.py and tools/screenshots.py run it on every page they visit).

Streamlit's data grid draws text on a canvas and clips it at its column's edge, without an ellipsis, so a cut
value reads as another value ('at ba' for 'at baseline'). It writes in Source Sans at 14 px with 8 px of padding
either side; it wraps a cell's text only in rows taller than 64 px (4rem), the lines 1.4 font heights apart.
Widths here are Source Sans 3's advance widths at 14 px, 5 % over (Streamlit's own font files, measured once).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

FONT_PX = 14  # Streamlit's dataframe text and headers
PADDING_PX = 8  # each side of a cell's text
LINE_PX = 1.4 * FONT_PX  # from one wrapped line to the next
VERTICAL_PADDING_PX = 3
WRAPPING_ROW_PX = 65  # the grid wraps text only in rows taller than 64 px
MIN_WIDTH_PX = 50  # Streamlit's narrowest column
SAFETY = 1.05
# advance widths (px at 14 px) of the printable ASCII characters, space to '~', in Source Sans 3 (weight 400)
ASCII_PX = (
    (2.8, 4.1, 6.0, 7.0, 7.0, 11.6, 8.6, 3.5, 4.3, 4.3, 5.9, 7.0, 3.5, 4.4, 3.5, 5.0)
    + (7.0,) * 10
    + (3.5, 3.5, 7.0, 7.0, 7.0, 6.0, 11.9, 7.7, 8.3, 8.0, 8.7, 7.4, 7.0, 8.7, 9.2, 3.7, 6.8, 8.2, 6.8, 10.2)
    + (9.1, 9.3, 8.0, 9.3, 8.0, 7.5, 7.5, 9.1, 7.3, 11.0, 7.2, 6.7, 7.6, 4.3, 5.0, 4.3, 7.0, 7.0, 7.6, 7.1)
    + (7.8, 6.4, 7.8, 7.0, 4.1, 7.1, 7.7, 3.5, 3.5, 7.0, 3.6, 11.7, 7.7, 7.6, 7.8, 7.8, 4.9, 5.9, 4.8, 7.7)
    + (6.6, 10.1, 6.3, 6.6, 6.0, 4.3, 3.4, 4.3, 7.0)
)
OTHER_PX = 10.0  # any other character ('±', '–', '✓': 7-9 px; '…' 13.3)
WIDE = {"…": 13.3}


def text_px(text: str) -> float:
    """About how wide `text` is drawn in the grid, in px (a little over, never under, for the fonts measured)."""
    return SAFETY * sum(
        ASCII_PX[ord(c) - 32] if 32 <= ord(c) < 127 else WIDE.get(c, OTHER_PX) for c in text.replace("\n", " ")
    )


def wrapped_lines(text: str, room: float) -> int:
    """Lines `text` takes wrapped at spaces into `room` px (a word wider than that broken where it must)."""
    count, space = 0, text_px(" ")
    for paragraph in text.split("\n"):
        count += 1
        used = None
        for word in paragraph.split():
            width = text_px(word)
            if used is None:
                used = width
            elif used + space + width <= room:
                used += space + width
            else:
                count, used = count + 1, width
            if used > room:  # a word longer than the line
                extra = math.ceil(used / room) - 1
                count, used = count + extra, used - extra * room
    return count


def row_px(lines: int) -> int | None:
    """The row height that holds `lines` wrapped lines; None (Streamlit's one-line rows) for one."""
    if lines <= 1:
        return None
    return max(WRAPPING_ROW_PX, math.ceil(FONT_PX + LINE_PX * (lines - 1) + VERTICAL_PADDING_PX + 4))


@dataclass(frozen=True)
class Fit:
    widths: dict[str, int]  # px per column
    lines: int  # the most lines a wrapped cell takes
    row_height: int | None  # for st.dataframe's row_height; None: one line

    @property
    def total(self) -> int:
        return sum(self.widths.values())


def _narrowest(header: str, cells: Sequence[str], lines: int, natural: int) -> int:
    """The narrowest width (px) at which every cell wraps into `lines` lines or fewer and the header fits."""
    low = math.ceil(max([text_px(header)] + [text_px(w) for c in cells for w in c.split()], default=0)) + 2 * PADDING_PX
    low = max(low, MIN_WIDTH_PX)
    high = max(natural, low)
    while low < high:  # the lines only fall as the width grows
        middle = (low + high) // 2
        if all(wrapped_lines(c, middle - 2 * PADDING_PX) <= lines for c in cells):
            high = middle
        else:
            low = middle + 1
    return low


def fit_columns(
    columns: Mapping[str, Sequence[str]], room: int, *, wrap: Collection[str] = (), max_lines: int = 6
) -> Fit:
    """Widths for columns (header -> the texts its cells show) within `room` px: each wide enough for its header
    and its longest text; where they do not all fit, the `wrap` columns narrowed to hold their text in as few
    lines as fit the room (up to `max_lines`; past it the table scrolls sideways), the room left shared among
    them, and the rows made tall enough for those lines."""
    natural = {
        name: max(MIN_WIDTH_PX, math.ceil(max([text_px(name), *map(text_px, cells)])) + 2 * PADDING_PX)
        for name, cells in columns.items()
    }
    if sum(natural.values()) <= room or not wrap:
        return Fit(natural, 1, None)
    for lines in range(2, max_lines + 1):
        widths = {
            name: _narrowest(name, cells, lines, natural[name]) if name in wrap else natural[name]
            for name, cells in columns.items()
        }
        if sum(widths.values()) <= room or lines == max_lines:
            break
    spare = room - sum(widths.values())
    wrapped = [name for name in columns if name in wrap]
    if spare > 0:  # the room left, shared among the wrapped columns (their text then has some air)
        for i, name in enumerate(wrapped):
            widths[name] += spare // len(wrapped) + (1 if i < spare % len(wrapped) else 0)
    return Fit(widths, lines, row_px(lines))


def shown_text(value, placeholder: str = "—") -> str:
    """A cell's text as the grid shows it: the placeholder for a missing value, else str()."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return placeholder
    return str(value)


def _written(value, fmt: str | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool) or fmt is None:
        return "" if isinstance(value, bool) else str(value)  # a checkbox has no text
    if fmt == "localized":
        return f"{value:,}"
    return fmt % value


def natural_widths(frame, formats: Mapping[str, str] | None = None, skip: Collection[str] = ()) -> dict[str, int]:
    """Per column of `frame` but `skip`, the px its name and its longest shown text take on one line (numbers
    written as their column's printf format in `formats` writes them, '%.4g', or 'localized' for 21,764)."""
    formats = formats or {}
    return {
        name: fit_columns({name: [_written(v, formats.get(name)) for v in frame[name]]}, 10**9).widths[name]
        for name in frame.columns
        if name not in skip
    }


def with_widths(config: Mapping[str, dict], widths: Mapping[str, int]) -> dict[str, dict]:
    """st.dataframe's column_config with these columns' widths set (a plain config for a column without one)."""
    out = {name: dict(entry) for name, entry in config.items()}
    for name, px in widths.items():
        out.setdefault(name, {})["width"] = px
    return out


def sized(frame, config: Mapping[str, dict] | None = None, *, formats=None, skip=(), index: bool = False) -> dict:
    """st.dataframe's column_config for `frame`: `config` with every column (but `skip`) as wide as its header and
    its longest text (natural_widths); with `index`, the index column too."""
    widths = natural_widths(frame, formats, skip)
    if index:
        name = str(frame.index.name or "")
        widths["_index"] = fit_columns({name: [_written(v, None) for v in frame.index]}, 10**9).widths[name]
    return with_widths(config or {}, widths)


# ---- the check, in the browser -----------------------------------------------------------------------------------

# Every st.dataframe in the page's main area that is drawn (not in a closed expander or another tab): its columns
# as the grid laid them out (the grid component's props, read through React), every header and cell measured with
# the grid's own font on a canvas: a header or one-line cell wider than its column, or a wrapped cell taller than
# its row, is cut; so is a column that runs past the table's right edge, unless `sideways` (a table meant to scroll).
# arguments: [shrink, sideways]: shrink < 1 checks as if every column were that much narrower (the check's check).
CUT_CELLS_JS = """
const shrink = arguments[0], sideways = arguments[1];
const ctx = document.createElement('canvas').getContext('2d');
const measure = (text, font) => { ctx.font = font; return ctx.measureText(text).width; };
const fiberOf = el => { const k = Object.keys(el).find(k => k.startsWith('__reactFiber$')); return k ? el[k] : null; };
const lines = (text, room, font) => {
  let count = 0;
  const space = measure(' ', font);
  for (const paragraph of String(text).split('\\n')) {
    count += 1;
    let used = null;
    for (const word of paragraph.split(/\\s+/).filter(w => w.length)) {
      const width = measure(word, font);
      if (used === null) used = width;
      else if (used + space + width <= room) used += space + width;
      else { count += 1; used = width; }
      if (used > room) { const extra = Math.ceil(used / room) - 1; count += extra; used -= extra * room; }
    }
  }
  return count;
};
const found = [];
let tables = 0, measured = 0, undrawn = 0;
for (const frame of document.querySelectorAll('[data-testid="stMain"] [data-testid="stDataFrame"]')) {
  const box = frame.getBoundingClientRect();
  if (box.width === 0 || box.height === 0) continue;
  const canvas = frame.querySelector('canvas[data-testid="data-grid-canvas"]');
  if (!canvas) { undrawn += 1; continue; }
  let props = null;
  for (let node = canvas && fiberOf(canvas); node; node = node.return) {
    const p = node.memoizedProps;
    if (p && Array.isArray(p.columns) && typeof p.getCellContent === 'function' && p.theme
        && typeof p.rows === 'number' && typeof p.width === 'number') { props = p; break; }
  }
  tables += 1;
  if (!props) { found.push(`table ${tables}: its columns could not be read`); continue; }
  const t = props.theme, pad = t.cellHorizontalPadding;
  const font = t.baseFontFull || `${t.baseFontStyle} ${t.fontFamily}`;
  const headerFont = t.headerFontFull || `${t.headerFontStyle} ${t.fontFamily}`;
  const size = parseFloat((font.match(/([\\d.]+)px/) || [0, '14'])[1]), step = (t.lineHeight || 1.4) * size;
  const height = r => typeof props.rowHeight === 'number' ? props.rowHeight : props.rowHeight(r);
  let left = 0;
  props.columns.forEach((column, i) => {
    const room = column.width * shrink, name = column.title || `column ${i + 1}`;
    const texts = [];
    if (column.title) {
      const icon = column.icon ? (t.headerIconSize || 18) + pad : 0;
      texts.push({text: column.title, font: headerFont, where: 'header', wraps: false, extra: icon});
    }
    for (let r = 0; r < Math.min(props.rows, 500); r++) {
      const cell = props.getCellContent([i, r]);
      if (!cell) continue;
      let text = null;
      if (typeof cell.displayData === 'string' && ['text', 'number', 'uri', 'markdown'].includes(cell.kind)) {
        text = cell.displayData;
      } else if (cell.data && typeof cell.data.displayText === 'string') {
        text = cell.data.displayText;
      }
      if (text) texts.push({text, font, where: `row ${r + 1}`, wraps: cell.allowWrapping === true, row: r, extra: 0});
    }
    for (const item of texts) {
      measured += 1;
      let cut;
      if (item.wraps) {
        const count = lines(item.text, room - 2 * pad, item.font);
        cut = size + step * (count - 1) + t.cellVerticalPadding > height(item.row) + 0.5;
      } else {
        cut = measure(item.text, item.font) + 2 * pad + item.extra > room + 0.5;
      }
      if (cut) {
        found.push(`table ${tables}, column '${name}' (${Math.round(room)} px): ${item.where} '${item.text}' is cut`);
        break;
      }
    }
    if (!sideways && left + room > props.width + 1) {
      found.push(`table ${tables}, column '${name}': past the table's right edge `
                 + `(${Math.round(left)}-${Math.round(left + room)} px of ${Math.round(props.width)} in view)`);
    }
    left += room;
  });
}
return {tables, measured, found, undrawn};
"""

# Text in the page's main area that the browser cut with an ellipsis (widget labels, toggle labels), and a
# segmented control's options that stick out of the column they sit in.
CUT_LABELS_JS = """
const out = [];
const main = document.querySelector('[data-testid="stMain"]');
if (!main) return out;
for (const el of main.querySelectorAll('*')) {
  if (el.closest('[data-testid="stDataFrame"], .js-plotly-plot')) continue;
  const box = el.getBoundingClientRect();
  if (box.width === 0 || box.height === 0) continue;
  if (getComputedStyle(el).textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1) {
    out.push(`'${el.textContent.trim()}' cut with an ellipsis`);
  }
}
const options = '[data-testid="stButtonGroup"] button, button[data-testid^="stBaseButton-segmented"]';
for (const button of main.querySelectorAll(options)) {
  if (!button.closest('[data-testid="stColumn"]')) continue;
  const column = button.closest('[data-testid="stColumn"]').getBoundingClientRect();
  const box = button.getBoundingClientRect();
  if (box.width > 0 && box.right > column.right + 1) {
    out.push(`button '${button.textContent.trim()}' sticks out of its column`);
  }
}
return out;
"""


def cut_cells(driver, *, sideways: bool = False, shrink: float = 1.0) -> dict:
    """{tables, measured, found, undrawn}: the data tables drawn on the driver's page, how many headers and cells
    were measured, what is cut (see CUT_CELLS_JS), and how many tables are not drawn (in a closed expander: the
    grid draws nothing there yet); `sideways`: the tables may run past the page's edge."""
    return driver.execute_script(CUT_CELLS_JS, shrink, sideways)


def cut_labels(driver) -> list[str]:
    """Labels cut with an ellipsis and buttons sticking out of their column on the driver's page."""
    return driver.execute_script(CUT_LABELS_JS)
