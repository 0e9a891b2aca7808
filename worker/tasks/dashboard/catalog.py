"""What the sim's dashboards are made of: themes, metrics, panel kinds, layouts and names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    lo: float
    hi: float
    inv: bool = False  #: high is good (cache hit ratio), so low values are the alarming ones


@dataclass(frozen=True)
class Theme:
    bg: str
    panel: str
    grid: str
    text: str
    muted: str
    accent: str
    accent2: str
    warn: str
    crit: str
    extra: tuple[str, str]


THEMES = (
    Theme(
        "#0B0F1A",
        "#111827",
        "#1F2A40",
        "#E6F1FF",
        "#6B7A99",
        "#00E5FF",
        "#FF2BD6",
        "#FFC400",
        "#FF3D57",
        ("#7CFF6B", "#8B5CF6"),
    ),
    Theme(
        "#140A1F",
        "#1E1030",
        "#33204D",
        "#F5E9FF",
        "#8E7AA8",
        "#FF6EC7",
        "#7DF9FF",
        "#FFD166",
        "#FF4D6D",
        ("#B8FF5C", "#9D7BFF"),
    ),
    Theme(
        "#050A06",
        "#0B140D",
        "#17301C",
        "#D8FFE0",
        "#5C8A66",
        "#39FF14",
        "#00FFC6",
        "#E7FF3C",
        "#FF5F45",
        ("#4FC3F7", "#C6FF8A"),
    ),
    Theme(
        "#0F0B05",
        "#1A140A",
        "#33270F",
        "#FFF3DC",
        "#9C8660",
        "#FFB000",
        "#FF6A00",
        "#FFE066",
        "#FF3B30",
        ("#00D1FF", "#C0FF3E"),
    ),
    Theme(
        "#07121C",
        "#0C1D2B",
        "#183349",
        "#E3F6FF",
        "#6F8FA6",
        "#7FDBFF",
        "#3D9BFF",
        "#FFD23F",
        "#FF5470",
        ("#A0FFE6", "#C792EA"),
    ),
    Theme(
        "#0D0608",
        "#180B0F",
        "#36161F",
        "#FFE8EC",
        "#9A6B76",
        "#FF1744",
        "#FF9100",
        "#FFEA00",
        "#FF5252",
        ("#18FFFF", "#E040FB"),
    ),
    Theme(
        "#0A0818",
        "#141028",
        "#2A2350",
        "#ECE8FF",
        "#7D74A8",
        "#B388FF",
        "#00E5FF",
        "#FFCA28",
        "#FF5370",
        ("#69F0AE", "#FF80AB"),
    ),
)
METRICS = (
    Metric("cpu", "%", 0, 100),
    Metric("mem", "%", 0, 100),
    Metric("io wait", "%", 0, 40),
    Metric("queue depth", "", 0, 500),
    Metric("p99 latency", "ms", 0, 800),
    Metric("p50 latency", "ms", 0, 200),
    Metric("error rate", "%", 0, 5),
    Metric("cache hit ratio", "%", 40, 100, inv=True),
    Metric("net rx", "MB/s", 0, 900),
    Metric("net tx", "MB/s", 0, 600),
    Metric("disk util", "%", 0, 100),
    Metric("gc pause", "ms", 0, 120),
    Metric("req/s", "", 0, 12000),
    Metric("open conns", "", 0, 4000),
    Metric("replication lag", "ms", 0, 1500),
    Metric("thread pool", "%", 0, 100),
    Metric("swap", "%", 0, 30),
    Metric("slo budget", "%", 0, 100, inv=True),
)
# fmt: on
#: Stacked-area groups: title, unit, ceiling per layer, layer names.
STACKS = (
    ("cpu split", "%", 25, ("user", "system", "io wait", "steal")),
    ("traffic by region", "req/s", 3000, ("eu-west", "us-east", "ap-south")),
    ("memory", "GB", 16, ("heap", "page cache", "buffers", "mapped")),
    ("errors by class", "/s", 40, ("4xx", "5xx", "timeout")),
)
ENTITIES = ("sh", "n", "pg", "q", "w", "az")
HOSTS = ("edge-1", "edge-2", "api-3", "api-7", "db-0", "db-1", "cache-2", "mq-4", "gw-9")
#: Panel kind -> (title choices, metrics drawn).
KINDS: dict[str, tuple[tuple[str, ...], int]] = {
    "gauges": (("Saturation", "Core Vitals", "Host Pressure"), 3),
    "sparklines": (("Live Signals", "Rolling Telemetry", "Trend Lines"), 4),
    "bars": (("Load by Shard", "Per-Node Pressure", "Hot Spots"), 10),
    "heatmap": (("Fleet Heatmap", "Node Matrix", "Thermal Grid"), 7),
    "events": (("Event Stream", "Alert Ticker", "Ops Log"), 3),
    "rings": (("Budgets", "Ratios", "Ring Meters"), 3),
    "scatter": (("Latency vs Load", "Request Cloud", "Correlation"), 2),
    "area": (("Stacked Load", "Composition", "Flow Mix"), 0),
}
#: grid-template-areas per panel count; letter i is panel i.
LAYOUTS = {
    4: (("a a b", "c d d"), ("a b", "c d"), ("a a b", "a a c", "d d d")),
    5: (("a a b c", "a a d e"), ("a b c", "d d e"), ("a b b", "c d e")),
    6: (("a b c", "d e f"), ("a a b c", "d e f f"), ("a b c d", "a e f d")),
}
FONTS = (
    "ui-monospace, 'JetBrains Mono', Menlo, Consolas, monospace",
    "system-ui, 'Segoe UI', Roboto, sans-serif",
    "'Eurostile', 'Bank Gothic', 'Segoe UI', Helvetica, sans-serif",
)
TITLE_HEADS = ("Orbital", "Neon", "Edge", "Core", "Atlas", "Helios", "Kestrel", "Vanta", "Halo")
TITLE_TAILS = ("Ops Grid", "Telemetry Deck", "Cluster Watch", "Fleet Monitor", "Control Room")
ZONES = ("eu-west-2", "us-east-1", "ap-south-1", "sa-east-1", "lab", "prod", "staging")
EXTERNAL_FONT = (
    '<link rel="preconnect" href="https://fonts.gstatic.com">\n'
    '<link href="https://fonts.googleapis.com/css2?family=Orbitron:wght@400;700&display=swap"'
    ' rel="stylesheet">\n'
)
