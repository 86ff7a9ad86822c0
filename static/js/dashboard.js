// Tenant overview: draws the server-built Plotly figures, then appends points from the tenant's live streams
// (apps.metrics LiveConsumer): gateway traffic per flushed batch, reward/success per worker tick, training
// steps of the jobs shown (new jobs are picked up from "training.jobs"), the shown release's analyses.
// Charts use naive UTC time strings ("YYYY-MM-DD HH:MM:SS"), as the server builds them.
(() => {
  const read = (id) => JSON.parse(document.getElementById(id).textContent);
  const figures = read("overview-figures");
  const releaseFigures = read("overview-release-figures");
  const live = read("overview-live");
  const config = {displayModeBar: false, responsive: true};
  const state = {received: {}, subscribed: new Set(), latencies: {}};
  window.overviewLive = state;
  if (!window.Plotly) return;

  const chart = (name) => document.getElementById(`chart-${name}`);
  for (const [name, figure] of Object.entries(figures)) Plotly.newPlot(chart(name), figure.data, figure.layout, config);
  const drawRelease = (metric, figure) => {
    let element = document.getElementById(`release-chart-${metric}`);
    if (!element) {
      document.getElementById("no-release-charts")?.remove();
      element = document.createElement("div");
      element.className = "chart"; element.id = `release-chart-${metric}`; element.dataset.metric = metric;
      document.getElementById("release-charts").appendChild(element);
    }
    Plotly.newPlot(element, figure.data, figure.layout, config);
  };
  for (const [metric, figure] of Object.entries(releaseFigures)) drawRelease(metric, figure);

  // Sets trace `index` at x (replacing the last point when it has the same x, appending otherwise).
  const upsert = (element, index, x, y) => {
    const trace = element.data[index];
    const last = trace.x.length - 1;
    if (last >= 0 && trace.x[last] === x) trace.y[last] = y;
    else { trace.x = [...trace.x, x]; trace.y = [...trace.y, y]; }
  };
  // Moves a date axis's end 5 minutes past `x` when a live point reaches it.
  const follow = (element, x) => {
    const range = element.layout.xaxis && element.layout.xaxis.range;
    if (!range || x < String(range[1]).slice(0, 19)) return;
    const end = new Date(new Date(`${x.replace(" ", "T")}Z`).getTime() + 5 * 60 * 1000);
    Plotly.relayout(element, {"xaxis.range": [range[0], end.toISOString().slice(0, 19).replace("T", " ")]});
  };
  const percentile = (sorted, fraction) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1))];
  const markVersion = (at, text) => {
    for (const name of ["traffic", "outcomes"]) {
      const layout = chart(name).layout;
      const shapes = [...(layout.shapes || []), {type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1,
                                                 line: {color: "#868e96", dash: "dot", width: 1}}];
      const annotations = [...(layout.annotations || []), {x: at, xref: "x", y: 1, yref: "paper", showarrow: false,
                                                           yanchor: "bottom", text, font: {size: 10}}];
      Plotly.relayout(chart(name), {shapes, annotations});
    }
  };

  const onTraffic = (point) => {
    const traffic = chart("traffic");
    const requests = traffic.data[0];
    const sameMinute = requests.x.length && requests.x[requests.x.length - 1] === point.minute;
    const base = (index) => (sameMinute ? traffic.data[index].y[traffic.data[index].y.length - 1] : 0);
    upsert(traffic, 0, point.minute, base(0) + point.requests);
    upsert(traffic, 1, point.minute, base(1) + point.errors);
    Plotly.redraw(traffic);
    follow(traffic, point.minute);
    const latencies = (state.latencies[point.minute] ||= []);
    latencies.push(...point.latencies_ms);
    latencies.sort((a, b) => a - b);
    const latency = chart("latency");
    upsert(latency, 0, point.minute, percentile(latencies, 0.5));
    upsert(latency, 1, point.minute, percentile(latencies, 0.95));
    Plotly.redraw(latency);
    follow(latency, point.minute);
  };
  const onOutcomes = (point) => {
    const outcomes = chart("outcomes");
    upsert(outcomes, 0, point.minute, point.reward_mean);
    upsert(outcomes, 1, point.minute, point.success_rate);
    Plotly.redraw(outcomes);
    follow(outcomes, point.minute);
  };
  const lossTrace = (name) => {
    const loss = chart("loss");
    let index = loss.data.findIndex((trace) => trace.name === name);
    if (index < 0) {
      Plotly.addTraces(loss, {type: "scatter", mode: "lines+markers", name, x: [], y: []});
      index = loss.data.length - 1;
    }
    return index;
  };
  const onLossStep = (name, payload) => {
    if (!payload.values || payload.values.loss === undefined) return;
    Plotly.extendTraces(chart("loss"), {x: [[payload.step]], y: [[payload.values.loss]]}, [lossTrace(name)]);
  };
  const onRelease = (payload) => {
    if (payload.kind === "status") {
      const status = document.getElementById("overview-release-status");
      const words = payload.status.replace("_", " ");
      if (status) { status.textContent = words; status.className = `status status-${payload.status}`; }
      if (payload.status === "promoted" || payload.status === "rolled_back") {
        const candidate = document.getElementById("overview-release")?.dataset.candidate;
        markVersion(payload.at.replace("T", " ").slice(0, 19), candidate ? `${candidate} ${words}` : words);
      }
      return;
    }
    if (payload.kind !== "analysis") return;
    for (const row of payload.measurements || []) {
      if (row.suite !== undefined && row.suite !== null) continue;
      const element = document.getElementById(`release-chart-${row.metric}`);
      if (!element) {
        drawRelease(row.metric, {data: [{x: [payload.at], y: [row.candidate], name: "candidate", mode: "lines+markers"},
                                        {x: [payload.at], y: [row.baseline], name: "baseline", mode: "lines+markers"}],
                                 layout: {title: {text: row.metric.replaceAll("_", " ")}, height: 260}});
      } else {
        Plotly.extendTraces(element, {x: [[payload.at], [payload.at]], y: [[row.candidate], [row.baseline]]}, [0, 1]);
      }
    }
  };

  const liveState = document.getElementById("overview-live-state");
  if (document.getElementById("overview").dataset.live !== "websocket") {
    liveState.textContent = "not live (served without WebSockets)";
    return;
  }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/live/${live.tenant}/`);
  const subscribe = (stream) => {
    if (!stream || state.subscribed.has(stream)) return;
    state.subscribed.add(stream);
    socket.send(JSON.stringify({subscribe: stream}));
  };
  const jobStreams = {...live.job_streams};
  const onlineStreams = {...(live.online_streams || {})};
  const streamJob = (stream) => Object.keys(jobStreams).find((job) => jobStreams[job] === stream);
  const streamRun = (stream) => Object.keys(onlineStreams).find((run) => onlineStreams[run] === stream);
  let confirmed = 0;
  socket.addEventListener("open", () => {
    [live.traffic, live.outcomes, live.jobs, live.release, ...Object.values(jobStreams),
     ...Object.values(onlineStreams)].forEach(subscribe);
  });
  socket.addEventListener("close", () => { liveState.textContent = "disconnected (reload to reconnect)"; });
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.subscribed) {
      confirmed += 1;
      if (confirmed === state.subscribed.size) { liveState.textContent = "live"; document.body.dataset.live = "subscribed"; }
      return;
    }
    if (!message.stream) return;
    state.received[message.stream] = (state.received[message.stream] || 0) + 1;
    const payload = message.payload;
    if (message.stream === live.traffic) onTraffic(payload);
    else if (message.stream === live.outcomes) onOutcomes(payload);
    else if (message.stream === live.release) onRelease(payload);
    else if (message.stream === live.jobs) {
      if (payload.online_run !== undefined) {
        if (payload.status === "running" && !onlineStreams[payload.online_run]) {
          onlineStreams[payload.online_run] = `training.online-${payload.online_run}`;
          lossTrace(`online run ${payload.online_run}`);
          subscribe(onlineStreams[payload.online_run]);
        }
      } else if (!["succeeded", "failed", "cancelled"].includes(payload.status) && !jobStreams[payload.job]) {
        jobStreams[payload.job] = `training.job-${payload.job}`;
        lossTrace(`job ${payload.job}`);
        subscribe(jobStreams[payload.job]);
      }
    } else if (streamJob(message.stream)) onLossStep(`job ${streamJob(message.stream)}`, payload);
    else if (streamRun(message.stream)) onLossStep(`online run ${streamRun(message.stream)}`, payload);
    document.body.dataset.lastLive = message.stream;
  });
})();
