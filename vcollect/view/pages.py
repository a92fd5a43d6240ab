"""The HTML of the dataset pages: the listing of every dataset and one page per dataset.

Each page is one self-contained document (CSS and script inline, charts as inline SVG, data as embedded
JSON): it needs no internet and opens the same from the server or from static files. Links are relative,
so ``index.html`` and ``d/<id>/index.html`` work under any folder. The episode table is sorted, filtered
and paged by the page's own script; videos and reward curves are fetched on demand from
``episode/<id>.webm`` and ``episode/<id>/rewards.svg`` beside the page.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from vcollect.view.charts import histogram_svg
from vcollect.view.summaries import DatasetCard, NamespaceGroup, VerifyReport

__all__ = ["PAGE_ROWS", "dataset_href", "dataset_page", "index_page"]

#: Episode rows the table shows at once (more on request).
PAGE_ROWS = 500

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:12px 20px;color:#1d2125}
h1{font-size:22px;margin:6px 0 12px}h2{font-size:17px;margin:18px 0 6px}
table{border-collapse:collapse;width:100%}th,td{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
th[data-key]{cursor:pointer;user-select:none}th[data-key]:hover{background:#eef2f6}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
tr.selected td{background:#fff6d6}tbody tr:hover td{background:#f4f7fa}
.bad{color:#b3261e;font-weight:600}.ok{color:#17663a;font-weight:600}.muted{color:#69737d}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.facts dt{color:#69737d}dl.facts dd{margin:0;overflow-wrap:anywhere}
pre{background:#f4f6f8;padding:6px;overflow:auto;max-height:260px;margin:4px 0}
.charts{display:flex;flex-wrap:wrap;gap:14px;margin:10px 0}
.chart .bar:hover{fill:#f0a030}
.player{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
video{background:black;max-width:520px;max-height:420px}
input[type=search]{width:340px;padding:4px}button{cursor:pointer}
.controls{display:flex;gap:10px;align-items:center;flex-wrap:wrap;margin:6px 0}
"""

_INDEX_SCRIPT = """
const box = document.getElementById('filter');
box.addEventListener('input', () => {
  const text = box.value.trim().toLowerCase();
  for (const row of document.querySelectorAll('tr.dataset')) {
    row.hidden = text !== '' && !row.dataset.id.toLowerCase().includes(text);
  }
});
"""

_DATASET_SCRIPT = """
const data = JSON.parse(document.getElementById('page-data').textContent);
const rows = data.episodes;  // [id, return, length, seed]
const columns = {id: 0, return: 1, length: 2, seed: 3};
const body = document.querySelector('#episode-table tbody');
const count = document.getElementById('episode-count');
const more = document.getElementById('more');
const note = document.getElementById('filter-note');
let shown = rows, limit = data.page_rows, sortKey = 'id', sortDir = 1;

function cell(value, digits) {
  if (value === null) return '-';
  return digits ? Number(value.toPrecision(digits)).toString() : String(value);
}
function parseFilter(text) {
  const tests = [];
  for (const token of text.split(/[\\s,]+/).filter(Boolean)) {
    const m = token.match(/^(id|return|length|seed)(<=|>=|!=|=|<|>)(-?[0-9.eE+-]+)$/i);
    const n = token.match(/^-?[0-9]+$/);
    if (m) {
      const col = columns[m[1].toLowerCase()], op = m[2], v = Number(m[3]);
      if (Number.isNaN(v)) return null;
      tests.push(r => r[col] !== null && ({'<': r[col] < v, '<=': r[col] <= v, '>': r[col] > v,
        '>=': r[col] >= v, '=': r[col] === v, '!=': r[col] !== v})[op]);
    } else if (n) {
      const v = Number(token);
      tests.push(r => r[0] === v);
    } else {
      return null;
    }
  }
  return tests;
}
function render() {
  const parts = [];
  for (const r of shown.slice(0, limit)) {
    parts.push(`<tr data-id="${r[0]}"><td class="num">${r[0]}</td><td class="num">${cell(r[1], 6)}</td>` +
      `<td class="num">${r[2]}</td><td class="num">${cell(r[3])}</td>` +
      `<td><button class="play" data-id="${r[0]}">play</button></td></tr>`);
  }
  body.innerHTML = parts.join('');
  count.textContent = `${shown.length.toLocaleString()} of ${rows.length.toLocaleString()} episodes`;
  more.hidden = shown.length <= limit;
  more.textContent = `show ${Math.min(data.page_rows, shown.length - limit).toLocaleString()} more`;
}
function apply() {
  const tests = parseFilter(document.getElementById('episode-filter').value);
  note.textContent = tests === null ? 'filter not understood: use id, return, length or seed with <, <=, >, >=, =, != (e.g. return>10 length<=200)' : '';
  const kept = tests === null ? rows : rows.filter(r => tests.every(t => t(r)));
  const col = columns[sortKey];
  shown = kept.slice().sort((a, b) => {
    if (a[col] === b[col]) return a[0] - b[0];
    if (a[col] === null) return 1;
    if (b[col] === null) return -1;
    return sortDir * (a[col] < b[col] ? -1 : 1);
  });
  for (const th of document.querySelectorAll('#episode-table th[data-key]')) {
    th.classList.toggle('sorted-asc', th.dataset.key === sortKey && sortDir === 1);
    th.classList.toggle('sorted-desc', th.dataset.key === sortKey && sortDir === -1);
  }
  render();
}
for (const th of document.querySelectorAll('#episode-table th[data-key]')) {
  th.addEventListener('click', () => {
    sortDir = th.dataset.key === sortKey ? -sortDir : (th.dataset.key === 'id' ? 1 : -1);
    sortKey = th.dataset.key;
    limit = data.page_rows;
    apply();
  });
}
document.getElementById('episode-filter').addEventListener('input', () => { limit = data.page_rows; apply(); });
more.addEventListener('click', () => { limit += data.page_rows; render(); });

const video = document.getElementById('video');
const videoNote = document.getElementById('video-note');
const curve = document.getElementById('curve');
function play(id) {
  for (const tr of body.querySelectorAll('tr.selected')) tr.classList.remove('selected');
  const tr = body.querySelector(`tr[data-id="${id}"]`);
  if (tr) tr.classList.add('selected');
  const row = rows.find(r => r[0] === id);
  document.getElementById('player-title').textContent =
    `episode ${id}: return ${cell(row[1], 6)}, ${row[2]} steps, seed ${cell(row[3])}`;
  videoNote.textContent = '';
  curve.innerHTML = '';
  if (data.static && !data.videos.includes(id)) {
    video.removeAttribute('src');
    video.hidden = true;
    videoNote.textContent = data.video_note || `episode ${id} was not rendered into this static copy; ` +
      '`vcollect view` renders any episode on demand';
    return;
  }
  const fps = data.static ? data.fps : Number(document.getElementById('fps').value) || data.fps;
  video.hidden = false;
  video.dataset.episode = String(id);
  video.dataset.fps = String(fps);
  video.src = data.static ? `episode/${id}.webm` : `episode/${id}.webm?fps=${fps}`;
  const img = document.createElement('img');
  img.alt = `reward per step of episode ${id}`;
  img.className = 'curve';
  img.src = `episode/${id}/rewards.svg`;
  curve.appendChild(img);
  video.play().catch(() => {});
}
video.addEventListener('error', () => {
  const src = video.getAttribute('src');
  if (!src || data.static) return;
  fetch(src).then(r => r.ok ? '' : r.text()).then(t => { videoNote.textContent = t; }).catch(() => {});
});
body.addEventListener('click', e => {
  const target = e.target.closest('tr[data-id]');
  if (target) play(Number(target.dataset.id));
});

const verifyButton = document.getElementById('verify-button');
if (verifyButton) {
  verifyButton.addEventListener('click', () => {
    const out = document.getElementById('verify-result');
    verifyButton.disabled = true;
    out.textContent = 'verifying (reads every shard)...';
    fetch('verify.json').then(r => r.json()).then(report => {
      out.innerHTML = '';
      const head = document.createElement('p');
      head.className = report.ok ? 'ok' : 'bad';
      head.textContent = report.error ? `verify failed: ${report.error}` : report.ok ?
        `verified: ${report.shards} shards, ${report.episodes} episodes, no problems` :
        `verified: ${report.problems.length} problems in ${report.shards} shards`;
      out.appendChild(head);
      const list = document.createElement('ul');
      for (const p of report.problems || []) { const li = document.createElement('li'); li.textContent = p; list.appendChild(li); }
      out.appendChild(list);
    }).catch(err => { out.textContent = `verify failed: ${err}`; }).finally(() => { verifyButton.disabled = false; });
  });
}
apply();
"""


def _size(num: int | None) -> str:
    """Bytes as a short human size."""
    if num is None:
        return "-"
    value = float(num)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _json_script(element_id: str, value: Any) -> str:
    """``value`` as JSON in a script element the page reads (``<``, ``>`` and ``&`` escaped)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _document(title: str, body: str, script: str) -> str:
    """A whole HTML document with the shared style and its script inline."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n"
            f"<script>{script}</script>\n</body></html>\n")


def dataset_href(dataset_id: str) -> str:
    """The relative link from the listing to a dataset's page."""
    return f"d/{quote(dataset_id, safe='/')}/index.html"


def _created(value: Any) -> str:
    return str(value or "-")[:19].replace("T", " ")


def _author(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "-" if value is None else str(value)


def index_page(groups: list[NamespaceGroup], *, root: str, generated: datetime | None = None,
               linked: Collection[str] | None = None) -> str:
    """The listing: every dataset under the root, one table per namespace.

    Args:
        groups: The datasets by namespace (``summaries.listing_groups``).
        root: The datasets root, as shown in the heading.
        generated: When the listing was taken (shown; None: not shown).
        linked: The datasets whose page exists (a static copy of some); None: every readable one.

    Returns:
        The HTML document.
    """
    total = sum(len(group.datasets) for group in groups)
    parts = [f"<h1>Datasets under {escape(root)}</h1>",
             f'<div class="controls"><input type="search" id="filter" placeholder="filter by id" '
             f'aria-label="filter datasets by id"><span class="muted" id="dataset-count">{total:,} datasets'
             f"{'' if generated is None else ', listed ' + escape(generated.strftime('%Y-%m-%d %H:%M:%S'))}"
             "</span></div>"]
    if not groups:
        parts.append('<p class="muted">no datasets here yet</p>')
    for group in groups:
        title = "datasets without a namespace" if group.namespace is None else f"namespace {group.namespace}"
        if group.description:
            title += f": {group.description}"
        parts.append(f'<section class="namespace" data-namespace="{escape(group.namespace or "")}">'
                     f"<h2>{escape(title)}</h2>")
        if group.note:
            parts.append(f'<p class="bad">{escape(group.note)}</p>')
        if not group.datasets:
            parts.append('<p class="muted">no datasets</p></section>')
            continue
        parts.append('<table class="datasets"><thead><tr><th>id</th><th class="num">episodes</th>'
                     '<th class="num">steps</th><th class="num">size</th><th>author</th><th>created</th>'
                     "<th>status</th></tr></thead><tbody>")
        for dataset_id, entry in group.datasets.items():
            damage = entry.get("damage") or []
            if entry.get("broken"):
                status = f'<span class="bad">broken</span>: {escape(str(entry["broken"]))}'
            elif damage:
                status = (f'<span class="bad">damaged</span> ({len(damage)} problem{"s" if len(damage) != 1 else ""}; '
                          "counts are of its whole shards)")
            else:
                status = '<span class="ok">ok</span>'
            link = escape(dataset_id)
            if not entry.get("broken") and (linked is None or dataset_id in linked):
                link = f'<a href="{escape(dataset_href(dataset_id))}">{link}</a>'
            episodes, steps = entry.get("total_episodes"), entry.get("total_steps")
            parts.append(
                f'<tr class="dataset" data-id="{escape(dataset_id)}"><td>{link}</td>'
                f'<td class="num">{"-" if episodes is None else f"{episodes:,}"}</td>'
                f'<td class="num">{"-" if steps is None else f"{steps:,}"}</td>'
                f'<td class="num">{_size(entry.get("size_bytes"))}</td><td>{escape(_author(entry.get("author")))}</td>'
                f"<td>{escape(_created(entry.get('created_at')))}</td><td>{status}</td></tr>"
            )
        parts.append("</tbody></table></section>")
    return _document(f"vcollect datasets: {root}", "\n".join(parts), _INDEX_SCRIPT)


def _facts(card: DatasetCard) -> str:
    """The card's facts: totals, spaces, env spec and metadata, as a definition list."""
    rows: list[tuple[str, str]] = [
        ("episodes", f"{card.total_episodes:,}"),
        ("steps", f"{card.total_steps:,}"),
        ("shards", f"{card.num_shards:,} ({_size(card.size_bytes)})"),
        ("observation space", escape(card.observation_space)),
        ("action space", escape(card.action_space)),
    ]
    if card.env_spec is None:
        rows.append(("env spec", '<span class="muted">none stored (episodes cannot be replayed)</span>'))
    else:
        rows.append(("env spec", f"{escape(str(card.env_spec.get('id')))}<details><summary>spec</summary>"
                                 f"<pre>{escape(json.dumps(card.env_spec, indent=1, sort_keys=True))}</pre></details>"))
    for key, value in card.metadata.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        rows.append((escape(str(key)), escape(text)))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _verify_block(card: DatasetCard, report: VerifyReport | None, *, static: bool) -> str:
    """The verify status: damage found when loading, the verify report when there is one, else a button."""
    parts = ['<section id="verify"><h2>verify</h2>']
    if card.damage:
        parts.append(f'<p class="bad">damaged: {len(card.damage)} problem{"s" if len(card.damage) != 1 else ""} found '
                     "when loading (the damaged shards are left out of everything on this page)</p><ul>")
        parts += [f"<li>{escape(line)}</li>" for line in card.damage]
        parts.append("</ul>")
    parts.append('<div id="verify-result">')
    if report is not None:
        if report.problems:
            parts.append(f'<p class="bad">verified: {len(report.problems)} problems in {report.shards:,} shards</p><ul>')
            parts += [f"<li>{escape(line)}</li>" for line in report.problems]
            parts.append("</ul>")
        else:
            parts.append(f'<p class="ok">verified: {report.shards:,} shards, {report.episodes:,} episodes, '
                         "no problems</p>")
    elif static:
        parts.append('<p class="muted">not verified in this static copy (`vcollect verify` checks it)</p>')
    else:
        parts.append('<p class="muted">not verified yet: verify reads every shard whole</p>')
    parts.append("</div>")
    if report is None and not static:
        parts.append('<button id="verify-button">verify now</button>')
    parts.append("</section>")
    return "".join(parts)


def dataset_page(card: DatasetCard, *, fps: float, verify: VerifyReport | None = None,
                 static_videos: Collection[int] | None = None, video_note: str | None = None) -> str:
    """A dataset's page: its card (facts, verify status, histograms), the episode table and the player.

    Args:
        card: The dataset's card.
        fps: Frames per second of its videos (the default of the served page's fps box).
        verify: A verify report to show (None: not run; the served page offers a button).
        static_videos: For a static copy, the episodes whose video and reward curve were written beside
            the page; None for a served page (every episode rendered on demand).
        video_note: Why no episode has a video (shown instead of one), if that is known.

    Returns:
        The HTML document.
    """
    static = static_videos is not None
    up = "../" * (len(card.dataset_id.split("/")) + 1)
    returns = card.episodes.returns
    lengths = card.episodes.lengths
    fps_box = ("" if static else f'<label>fps <input id="fps" type="number" min="1" max="240" step="1" '
                                  f'value="{fps:g}" style="width:60px"></label>')
    body = "\n".join([
        f'<nav><a href="{up}index.html">all datasets</a></nav>',
        f"<h1>{escape(card.dataset_id)}</h1>",
        f'<section id="card">{_facts(card)}</section>',
        _verify_block(card, verify, static=static),
        '<section id="charts"><h2>returns and lengths</h2><div class="charts">',
        histogram_svg(returns, title="return histogram", xlabel="return", css_class="histogram returns"),
        histogram_svg(lengths, title="length histogram", xlabel="steps", css_class="histogram lengths"),
        "</div></section>",
        '<section id="episodes"><h2>episodes</h2><div class="controls">'
        '<input type="search" id="episode-filter" placeholder="filter: return>10 length<=200 seed=3 (or an id)" '
        'aria-label="filter episodes"><span id="episode-count" class="muted"></span>'
        f'{fps_box}<span id="filter-note" class="bad"></span></div>',
        '<table id="episode-table"><thead><tr><th class="num" data-key="id">episode</th>'
        '<th class="num" data-key="return">return</th><th class="num" data-key="length">length</th>'
        '<th class="num" data-key="seed">seed</th><th></th></tr></thead><tbody></tbody></table>',
        '<button id="more" hidden></button></section>',
        '<section id="player-section"><h2 id="player-title">pick an episode to play it</h2>'
        '<div class="player"><div><video id="video" controls muted playsinline preload="auto" hidden></video>'
        '<p id="video-note" class="muted"></p><div id="curve"></div></div></div></section>',
        _json_script("page-data", {
            "episodes": card.episodes.rows(),
            "static": static,
            "videos": sorted(int(i) for i in static_videos) if static_videos is not None else None,
            "video_note": video_note,
            "fps": fps,
            "page_rows": PAGE_ROWS,
        }),
    ])
    return _document(f"{card.dataset_id}: vcollect dataset", body, _DATASET_SCRIPT)
