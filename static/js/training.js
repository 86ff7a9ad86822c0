// Training job page: draws the server-built Plotly figures, then appends each step the worker publishes
// on the tenant's "training.job-<id>" stream (apps.metrics LiveConsumer), moves the progress bar and the
// status, and appends log lines. Reloads once when the job ends so the produced version shows.
(() => {
  const live = document.getElementById("job-live");
  const figures = JSON.parse(document.getElementById("job-figures").textContent);
  const chartKeys = JSON.parse(document.getElementById("job-chart-keys").textContent);
  for (const [chart, figure] of Object.entries(figures)) {
    if (window.Plotly) Plotly.newPlot(`chart-${chart}`, figure.data, figure.layout, {displayModeBar: false, responsive: true});
  }
  if (!live || live.dataset.final === "true") return;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/live/${live.dataset.tenant}/`);
  socket.addEventListener("open", () => socket.send(JSON.stringify({subscribe: live.dataset.stream})));
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.stream !== live.dataset.stream) return;
    const payload = message.payload;
    if (payload.values && window.Plotly) {
      for (const [chart, keys] of Object.entries(chartKeys)) {
        Plotly.extendTraces(`chart-${chart}`, {x: keys.map(() => [payload.step]), y: keys.map((key) => [payload.values[key]])},
                            keys.map((_, index) => index));
      }
      const histogram = payload.values.staleness_histogram || [];
      Plotly.react("chart-staleness", [{type: "bar", x: histogram.map((pair) => pair[0]), y: histogram.map((pair) => pair[1])}],
                   figures.staleness.layout);
    }
    if (payload.step !== undefined) {
      document.getElementById("job-progress").value = payload.step;
      document.getElementById("job-step").textContent = payload.step;
    }
    if (payload.eta_at) document.getElementById("job-eta").textContent = new Date(payload.eta_at).toLocaleTimeString();
    if (payload.log) document.getElementById("job-log").textContent += `${new Date().toLocaleTimeString()} ${payload.log.level} ${payload.log.message}\n`;
    if (payload.status) {
      const status = document.getElementById("job-status");
      status.textContent = payload.status;
      status.className = `status status-${payload.status}`;
      if (["succeeded", "failed", "cancelled"].includes(payload.status)) { socket.close(); setTimeout(() => location.reload(), 500); }
    }
  });
})();
