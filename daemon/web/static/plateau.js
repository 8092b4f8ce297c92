// Plateau's web page: the job page's charts (uPlot) and the refresh of pages
// that change. The server renders everything else, so every page reads
// without this script; it is plain ES2020, loaded with `defer` after uPlot.
(function () {
  "use strict";

  const REFRESH_MS = 5000;
  const KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
  // For a component the stylesheet has no --c-<name> property for.
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
                   "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"];
  const charts = [];

  // sessionStorage may be off (privacy settings, file://): the page then
  // just forgets which series were hidden.
  function stored(key, fallback) {
    try {
      const value = sessionStorage.getItem(key);
      return value === null ? fallback : JSON.parse(value);
    } catch (e) {
      return fallback;
    }
  }
  function store(key, value) {
    try {
      sessionStorage.setItem(key, JSON.stringify(value));
    } catch (e) {
      // See stored().
    }
  }

  // The colors are defined once, in plateau.css, for the bars and the chart.
  function color(name, fallback) {
    const value = getComputedStyle(document.documentElement)
      .getPropertyValue("--c-" + name).trim();
    return value || fallback;
  }

  function bytes(value) {
    if (value == null) return "–";
    if (Math.abs(value) >= GiB) return (value / GiB).toFixed(2) + " GiB";
    return (value / MiB).toFixed(1) + " MiB";
  }
  // Axis ticks: as short as the value allows ("64 MiB", "1.5 GiB").
  function tickBytes(value) {
    if (value === 0) return "0";
    if (Math.abs(value) >= GiB) return +(value / GiB).toFixed(2) + " GiB";
    if (Math.abs(value) >= MiB) return +(value / MiB).toFixed(1) + " MiB";
    return +(value / KiB).toFixed(1) + " KiB";
  }
  // Tick steps in powers of two of KiB, MiB and GiB, so that ticks land on
  // round numbers of the unit they are shown in.
  const BYTE_INCRS = [KiB, MiB, GiB].flatMap(
    (unit) => [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].map((n) => n * unit));
  // Time ticks in whole seconds: samples come about once a second, and
  // uPlot's default would label a short run in milliseconds.
  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600,
                      7200, 10800, 21600, 43200, 86400, 172800, 604800];

  function number(digits) {
    return (u, value) => (value == null ? "–" : value.toFixed(digits));
  }
  // A y axis as wide as its longest label (uPlot's default is fixed).
  function axisSize(u, values) {
    if (!values) return 50;
    return Math.max(40, ...values.map((v) => String(v ?? "").length * 7)) + 16;
  }

  function note(box, text) {
    box.textContent = "";
    const p = document.createElement("p");
    p.className = "note";
    p.textContent = text;
    box.appendChild(p);
  }

  // uPlot's height is that of its plot and axes; its title and legend come
  // on top, and their height is known only once drawn (the legend wraps with
  // the width). Draw, measure, and shrink the plot until it all fits the box.
  function fit(chart) {
    const box = chart.root.parentNode;
    const style = getComputedStyle(box);
    const width = box.clientWidth - parseFloat(style.paddingLeft) -
      parseFloat(style.paddingRight);
    const inner = box.clientHeight - parseFloat(style.paddingTop) -
      parseFloat(style.paddingBottom);
    let height = chart.height;
    for (let i = 0; i < 3; i++) {
      // batch() commits at once, where setSize() alone waits a microtask.
      chart.batch(() => chart.setSize({width: Math.max(width, 120), height}));
      const next = Math.max(inner - (chart.root.offsetHeight - chart.height), 60);
      if (next === height) break;
      height = next;
    }
  }

  function draw(box, opts, data) {
    if (data[0].length < 2) {
      note(box, "Not enough progress yet.");
      return;
    }
    box.textContent = "";
    // Hidden series stay hidden across the refreshes of a live job.
    const key = "plateau-hidden:" + box.id;
    const saved = stored(key, []);
    const hidden = Array.isArray(saved) ? saved : [];
    opts.series.forEach((series, i) => {
      if (i > 0 && hidden.includes(series.label)) series.show = false;
    });
    opts.width = Math.max(box.clientWidth, 120);
    opts.height = Math.max(box.clientHeight - 90, 60);
    opts.hooks = {setSeries: [(u) => store(key, u.series.filter(
      (series, i) => i > 0 && !series.show).map((series) => series.label))]};
    const chart = new uPlot(opts, data, box);
    charts.push(chart);
    fit(chart);
  }

  // A resumed attempt repeats the steps after its checkpoint: a step drops
  // what a previous attempt had at or after it, so that the line follows
  // the run the job kept.
  function lossChart(box, samples) {
    const kept = [];
    for (const s of samples) {
      if (s.loss == null && s.validation_loss == null) continue;
      while (kept.length && kept[kept.length - 1].step >= s.step) kept.pop();
      kept.push(s);
    }
    const series = [
      {label: "Step"},
      {label: "Training loss", stroke: "#0969da", width: 2, spanGaps: true,
       value: number(4)},
    ];
    const data = [kept.map((s) => s.step), kept.map((s) => s.loss ?? null)];
    if (kept.some((s) => s.validation_loss != null)) {
      series.push({label: "Validation loss", stroke: "#bc4c00", width: 2,
                   dash: [6, 4], spanGaps: true, value: number(4),
                   points: {show: true, size: 6, fill: "#bc4c00"}});
      data.push(kept.map((s) => s.validation_loss ?? null));
    }
    draw(box, {title: "Loss", scales: {x: {time: false}}, series,
               axes: [{label: "step", labelSize: 20}, {size: axisSize}]}, data);
  }

  // Server timestamps are UTC ("…Z"); the time axes say UTC too.
  const utc = (t) => uPlot.tzDate(new Date(t * 1e3), "Etc/UTC");

  function throughputChart(box, samples) {
    draw(box, {
      title: "Tokens/s", tzDate: utc,
      scales: {y: {range: (u, min, max) => [0, Math.max(max, 1) * 1.05]}},
      series: [
        {label: "Time (UTC)"},
        {label: "Tokens/s", stroke: "#1a7f37", width: 2, fill: "rgba(26,127,55,0.08)",
         value: (u, v) => (v == null ? "–" : Math.round(v).toLocaleString())},
      ],
      axes: [{incrs: TIME_INCRS}, {size: axisSize}],
    }, [samples.map((s) => s.t), samples.map((s) => s.tokens_per_second ?? null)]);
  }

  function memoryChart(box, samples, components) {
    const series = [{label: "Time (UTC)"}];
    const data = [samples.map((s) => s.t)];
    components.forEach((name, c) => {
      const values = samples.map((s) => (s.component_peak_bytes || [])[c] ?? null);
      if (!values.some((v) => v > 0)) return;
      series.push({label: name, stroke: color(name, PALETTE[c % PALETTE.length]),
                   width: 1.5, value: (u, v) => bytes(v)});
      data.push(values);
    });
    series.push({label: "device peak", stroke: color("device-total", "#333"),
                 width: 2, dash: [5, 3], value: (u, v) => bytes(v)});
    data.push(samples.map((s) => s.device_peak_bytes ?? null));
    draw(box, {
      title: "Device memory peaks", tzDate: utc,
      scales: {y: {range: (u, min, max) => [0, Math.max(max, MiB) * 1.05]}},
      series,
      axes: [{incrs: TIME_INCRS},
             {size: axisSize, incrs: BYTE_INCRS,
              values: (u, splits) => splits.map(tickBytes)}],
    }, data);
  }

  function jobPage() {
    const boxes = {
      loss: document.getElementById("loss-chart"),
      throughput: document.getElementById("throughput-chart"),
      memory: document.getElementById("memory-chart"),
    };
    const present = Object.values(boxes).filter(Boolean);
    let data;
    try {
      data = JSON.parse(document.getElementById("plateau-data").textContent);
    } catch (e) {
      present.forEach((box) => note(box, "No chart data on this page."));
      return;
    }
    if (data.job && data.job.live) scheduleRefresh();
    if (typeof uPlot === "undefined") {
      present.forEach((box) => note(box, "Charts unavailable: uPlot did not load."));
      return;
    }
    const samples = Array.isArray(data.samples) ? data.samples : [];
    const components = Array.isArray(data.components) ? data.components : [];
    const make = {
      loss: (box) => lossChart(box, samples),
      throughput: (box) => throughputChart(box, samples),
      memory: (box) => memoryChart(box, samples, components),
    };
    for (const [name, box] of Object.entries(boxes)) {
      if (!box) continue;
      // One chart's failure leaves the others (and is logged, for the test).
      try {
        make[name](box);
      } catch (e) {
        console.error("plateau: the " + name + " chart:", e);
        note(box, "This chart could not be drawn.");
      }
    }
    let pending = false;
    window.addEventListener("resize", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; charts.forEach(fit); });
    });
  }

  // A full reload: the server renders the page anew and the fixed-height
  // chart boxes keep the layout stable, so the browser's own scroll
  // restoration keeps the reader's place. A hidden tab waits.
  function scheduleRefresh() {
    setTimeout(function refresh() {
      if (document.hidden) setTimeout(refresh, REFRESH_MS);
      else location.reload();
    }, REFRESH_MS);
  }

  const page = document.body.dataset.page;
  if (page === "job") jobPage();
  else if (page === "jobs") scheduleRefresh();
})();
