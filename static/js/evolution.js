// The evolution policy page: draws the server's signal figures, then follows the tenant's `evolution` stream:
// new signal points extend the charts, decisions appear (or change) in the timeline, clusters update.
(() => {
  const script = document.currentScript;
  const policy = Number(script.dataset.policy);
  const figures = JSON.parse(document.getElementById("signal-figures").textContent);
  const labels = JSON.parse(document.getElementById("decision-labels").textContent);
  const thresholds = JSON.parse(document.getElementById("signal-thresholds").textContent);
  const timeline = document.getElementById("timeline");
  const urls = timeline.dataset;
  const canApprove = urls.canApprove === "true";
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  const charts = document.getElementById("charts");
  const chartTime = (iso) => new Date(iso).toISOString().slice(0, 19).replace("T", " ");
  const withId = (template, id) => template.replace("/0/", `/${id}/`);  // the URL reversed with id 0

  const draw = (name, figure) => {
    let element = document.getElementById("chart-" + name);
    if (!element) {
      const empty = document.getElementById("no-charts");
      if (empty) empty.remove();
      element = document.createElement("div");
      element.className = "chart"; element.id = "chart-" + name; element.dataset.signal = name;
      charts.appendChild(element);
    }
    Plotly.newPlot(element, figure.data, figure.layout, {displayModeBar: false, responsive: true});
  };
  Object.entries(figures).forEach(([name, figure]) => draw(name, figure));

  const addPoints = (payload) => {
    const at = chartTime(payload.at);
    Object.entries(payload.values || {}).forEach(([name, value]) => {
      const element = document.getElementById("chart-" + name);
      const rule = thresholds[name];
      if (!element || !element.data) {
        const data = [{x: [at], y: [value], mode: "lines+markers", line: {color: "#1c7ed6"}}];
        if (rule) data.push({x: [at, at], y: [rule.threshold, rule.threshold], mode: "lines", line: {color: "#d9480f", dash: "dash"}});
        draw(name, {data, layout: {title: {text: name.replaceAll("_", " ")}, height: 200, showlegend: false,
                                   margin: {l: 40, r: 10, t: 32, b: 24}}});
        return;
      }
      Plotly.extendTraces(element, {x: [[at]], y: [[value]]}, [0]);
      if (rule && element.data.length > 1) {  // keep the threshold line as wide as the series
        Plotly.restyle(element, {x: [[element.data[0].x[0], at]], y: [[rule.threshold, rule.threshold]]}, [1]);
      }
    });
  };

  const node = (tag, attributes = {}, text = "") => {
    const element = document.createElement(tag);
    Object.entries(attributes).forEach(([key, value]) => element.setAttribute(key, value));
    if (text) element.textContent = text;
    return element;
  };
  const links = (parent, title, entries) => {
    if (!entries.length) return;
    const block = node("div", {class: title.toLowerCase()}, `${title}: `);
    entries.forEach(([text, href]) => { block.appendChild(node("a", {href}, text)); block.append(" "); });
    parent.appendChild(block);
  };
  const signalRows = (signals) => Array.isArray(signals) ? signals
    : Object.entries(signals || {}).map(([name, rule]) => ({name, ...rule}));
  const shown = (value) => value === null || value === undefined ? "—" : Number(value).toFixed(4).replace(/\.?0+$/, "");
  const form = (action, button, extra) => {
    const element = node("form", {method: "post", action, class: "inline"});
    element.appendChild(node("input", {type: "hidden", name: "csrfmiddlewaretoken", value: csrf}));
    if (extra) element.appendChild(extra);
    element.appendChild(button);
    return element;
  };

  const decisionItem = (decision) => {
    const item = node("li", {class: "decision card", id: `decision-${decision.id}`, "data-decision": decision.id, "data-status": decision.status});
    const head = node("div");
    head.appendChild(node("strong", {class: "kind"}, labels.kind[decision.kind] || decision.kind));
    head.append(" · ");
    head.appendChild(node("span", {class: `status status-${decision.status}`}, labels.status[decision.status] || decision.status));
    head.append(" · ");
    head.appendChild(node("time", {class: "muted"}, chartTime(decision.created_at)));
    if (decision.parent) {
      const parent = document.querySelector(`li[data-decision="${decision.parent}"] .kind`);
      head.append(" ");
      head.appendChild(node("a", {class: "muted parent", href: `#decision-${decision.parent}`},
        `after the ${parent ? parent.textContent.toLowerCase() : "earlier"} decision`));
    }
    item.appendChild(head);
    item.appendChild(node("p", {class: "reason"}, decision.reason));
    const evidence = decision.evidence || {};
    const signals = signalRows(evidence.signals);
    if (signals.length) {
      const list = node("ul", {class: "evidence-signals"});
      signals.forEach((row) => {
        const line = node("li", {"data-signal": row.name});
        line.appendChild(node("code", {}, row.name));
        line.append(` ${shown(row.value)} ${row.op || ""} ${row.threshold ?? ""}`);
        list.appendChild(line);
      });
      item.appendChild(list);
    }
    links(item, "Examples", (evidence.trajectories || []).slice(0, 10).map((id) => [String(id).slice(0, 8) + "…", `/trajectories/${id}/`]));
    // Clusters by their tool and error (the row below, when the page has it), never by id.
    links(item, "Tool failures", (evidence.clusters || []).slice(0, 10).map((id) => {
      const row = document.getElementById(`cluster-${id}`);
      const words = row ? `${row.cells[0].textContent}: ${row.cells[2].textContent}`.slice(0, 80) : "a cluster";
      return [words, `#cluster-${id}`];
    }));
    if (decision.gate_words) item.appendChild(node("div", {class: "evidence-gate"}, `Gate: ${decision.gate_words}`));
    // What it started, by what it is (the page's reload names each exactly: apps/evolution/views.started_names).
    const version = decision.version === null || decision.version === undefined ? "" : ` of v${decision.version}`;
    const started = decision.started || {};
    links(item, "Started", [
      ...(started.releases || []).map((id) => [`release${version}`, withId(urls.releaseUrl, id)]),
      ...(started.eval_runs || []).map((id, index) => [index === 0 ? `evaluation${version}` : "evaluation of production", withId(urls.evalRunUrl, id)]),
      ...(started.online_runs || []).map((id) => ["online run from production", `${urls.onlineUrl}#online-${id}`]),
      ...(started.versions || []).map(() => ["the new version", urls.lineageUrl]),
    ]);
    if (decision.approvals_required) {
      const names = (decision.approvals || []).map((row) => row.actor).join(", ");
      item.appendChild(node("div", {class: "approvals muted"},
        `Approvals ${(decision.approvals || []).length} of ${decision.approvals_required}${names ? ": " + names : ""}`));
    }
    if (decision.outcome) item.appendChild(node("div", {class: "outcome"}, decision.outcome));
    if (canApprove && decision.status === "proposed") {
      const actions = node("div", {class: "inline-form decision-actions"});
      const approve = form(withId(urls.approveUrl, decision.id), node("button", {type: "submit", class: "primary approve"}, "Approve"));
      approve.dataset.confirm = decision.approval_question || "Approve this decision?";
      approve.addEventListener("submit", (event) => { if (!window.confirm(approve.dataset.confirm)) event.preventDefault(); });
      actions.appendChild(approve);
      actions.appendChild(form(withId(urls.rejectUrl, decision.id), node("button", {type: "submit", class: "danger reject"}, "Reject"),
        node("input", {type: "text", name: "reason", placeholder: "why not", maxlength: "500", "aria-label": "Why not (for the record)"})));
      item.appendChild(actions);
    }
    return item;
  };

  const showDecision = (decision) => {
    const list = document.getElementById("decisions");
    const empty = document.getElementById("no-decisions");
    if (empty) empty.remove();
    const item = decisionItem(decision);
    const existing = list.querySelector(`li[data-decision="${decision.id}"]`);
    if (existing) existing.replaceWith(item); else list.prepend(item);
  };

  const showCluster = (cluster) => {
    const body = document.querySelector("#clusters tbody");
    const empty = document.getElementById("no-clusters");
    if (empty) empty.remove();
    let row = cluster.id ? document.getElementById(`cluster-${cluster.id}`) : null;
    if (!row) {
      row = node("tr", cluster.id ? {id: `cluster-${cluster.id}`, "data-cluster": cluster.id} : {});
      const cells = [["code", cluster.tool], ["", cluster.kind], ["", cluster.signature], ["code", cluster.argument_shape],
                     ["", ""], ["", cluster.first_seen ? chartTime(cluster.first_seen) : ""], ["", ""], ["", ""]];
      cells.forEach(([inner, text], index) => {
        const cell = node("td", index === 4 ? {class: "count"} : index === 6 ? {class: "last-seen"} : {});
        if (inner) cell.appendChild(node(inner, {}, text || "")); else cell.textContent = text || "";
        row.appendChild(cell);
      });
      body.prepend(row);
    }
    row.querySelector(".count").textContent = cluster.count ?? "";
    if (cluster.last_seen) row.querySelector(".last-seen").textContent = chartTime(cluster.last_seen);
  };

  const connect = () => {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/live/${script.dataset.tenant}/`);
    socket.addEventListener("open", () => socket.send(JSON.stringify({subscribe: script.dataset.stream})));
    socket.addEventListener("message", (message) => {
      const event = JSON.parse(message.data);
      if (!event.payload) { if (event.subscribed) document.body.dataset.live = "subscribed"; return; }
      const payload = event.payload;
      if (payload.type === "policy" && payload.id === policy) {
        if (payload.revision !== Number(document.getElementById("policy-revision").textContent)) {
          document.getElementById("policy-changed").hidden = false;
        }
        return;
      }
      if (payload.policy !== policy) return;
      if (payload.type === "decision") showDecision(payload);
      else if (payload.type === "signals") addPoints(payload);
      else if (payload.type === "cluster") showCluster(payload);
    });
    socket.addEventListener("close", (closed) => {
      delete document.body.dataset.live;
      if (closed.code < 4000) setTimeout(connect, 3000);  // 4401 / 4404: signed out or no longer a member
    });
  };
  connect();
})();
