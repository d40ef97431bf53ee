// sparkrun console: live updates on top of pages the daemon renders complete.
// Everything shown comes from the daemon's /v1/ API and is written with textContent, never as HTML.
"use strict";

(function () {
  const body = document.body;
  const pages = { jobs: jobsPage, job: jobPage, deployments: deploymentsPage };
  const start = pages[body.dataset.page];
  if (start) start();

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function age(seconds) {
    if (seconds < 120) return Math.round(seconds) + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }

  // -- jobs: the list refreshes itself, so new jobs appear without a reload --------------------------
  function jobsPage() {
    const rows = document.getElementById("jobs");
    const wanted = body.dataset.state;
    async function refresh() {
      const response = await fetch("/v1/jobs?limit=100", { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      const now = Date.now() / 1000;
      const known = new Map();
      rows.querySelectorAll("tr[data-job]").forEach((row) => known.set(row.dataset.job, row));
      const fresh = [];
      for (const job of data.jobs) {
        if (wanted && job.state !== wanted) continue;
        const old = known.get(job.job_id);
        const last = old ? old.lastElementChild.textContent : "";
        const row = el("tr");
        row.dataset.job = job.job_id;
        const link = el("a", job.job_id);
        link.href = "/ui/jobs/" + encodeURIComponent(job.job_id);
        const first = el("td");
        first.appendChild(link);
        row.appendChild(first);
        row.appendChild(el("td", job.state, "state-" + job.state));
        row.appendChild(el("td", job.operation));
        row.appendChild(el("td", age(now - job.created_at)));
        const end = job.finished_at || now;
        row.appendChild(el("td", job.started_at ? (end - job.started_at).toFixed(1) + " s" : ""));
        row.appendChild(el("td", last));
        fresh.push(row);
      }
      rows.replaceChildren(...fresh);
      const empty = document.getElementById("no-jobs");
      if (empty) empty.hidden = fresh.length > 0;
    }
    setInterval(() => refresh().catch(() => {}), 2000);
  }

  // -- one job: its events live, resumed after a cut without duplicates ------------------------------
  function progressCell(event) {
    const cell = el("td");
    if (event.current === undefined) return cell;
    const unit = event.unit || "";
    if (event.total_kind === "exact" && event.total > 0) {
      const bar = el("progress");
      bar.max = event.total;
      bar.value = event.current;
      cell.appendChild(bar);
      cell.appendChild(el("span", " " + event.current + " / " + event.total + " " + unit));
    } else if (event.total_kind === "upper_bound" && event.total !== undefined) {
      cell.appendChild(el("span", event.current + " of up to " + event.total + " " + unit));
    } else {
      const spinner = el("span", null, "spinner");
      spinner.setAttribute("role", "img");
      spinner.setAttribute("aria-label", "working");
      cell.appendChild(spinner);
      cell.appendChild(el("span", " " + event.current + " " + unit));
    }
    return cell;
  }

  function activityRow(event, previous) {
    const level = event.level === "warning" || event.level === "error" ? event.level : "";
    const row = el("tr", null, level);
    row.dataset.key = event.type === "progress" ? "phase:" + event.slug : event.activity_id;
    const old = (i) => (previous ? previous.children[i].textContent : "");
    row.appendChild(el("td", event.type === "progress" ? "launch" : event.source));
    row.appendChild(el("td", event.host || old(1)));
    row.appendChild(el("td", event.type === "progress" ? event.slug : event.stage || old(2)));
    row.appendChild(el("td", event.status || old(3)));
    if (event.current !== undefined || !previous) row.appendChild(progressCell(event));
    else row.appendChild(previous.children[4].cloneNode(true));
    const message = el("td");
    if (level) message.appendChild(el("strong", level.toUpperCase() + " ", "level"));
    message.appendChild(document.createTextNode(event.message || ""));
    row.appendChild(message);
    return row;
  }

  function eventLine(seq, event) {
    const level = event.level || "info";
    const line = el("li", null, level);
    line.dataset.seq = seq;
    if (level === "warning" || level === "error") line.appendChild(el("strong", level.toUpperCase() + " "));
    const where = [event.source, event.host, event.stage].filter(Boolean).join(" ");
    line.appendChild(el("span", where, "where"));
    line.appendChild(document.createTextNode(" " + (event.message || event.kind || event.type)));
    return line;
  }

  async function showOutcome(job) {
    const response = await fetch("/v1/jobs/" + encodeURIComponent(job), { credentials: "same-origin" });
    if (!response.ok) return;
    const data = await response.json();
    document.getElementById("state").textContent = data.state;
    const outcome = document.getElementById("outcome");
    outcome.replaceChildren();
    outcome.hidden = false;
    if (data.state === "succeeded") {
      outcome.appendChild(el("h2", "Result"));
      outcome.appendChild(el("pre", JSON.stringify(data.result, null, 2)));
    } else if (data.error) {
      outcome.className = "error";
      outcome.appendChild(el("h2", "Error"));
      const line = el("p");
      line.appendChild(el("strong", "ERROR "));
      line.appendChild(document.createTextNode(data.error.type + ": " + data.error.message));
      outcome.appendChild(line);
    } else {
      outcome.appendChild(el("p", "The job ended: " + data.state));
    }
    for (const id of ["cancel", "prompts"]) {
      const node = document.getElementById(id);
      if (node) node.remove();
    }
  }

  function jobPage() {
    const job = body.dataset.job;
    const rows = document.getElementById("activities");
    const log = document.getElementById("events");
    const status = document.getElementById("stream-state");
    let seen = Number(body.dataset.cursor || 0);
    let prompts = document.querySelectorAll("#prompts form").length;
    if (["succeeded", "failed", "cancelled", "lost"].includes(body.dataset.state)) return;

    const source = new EventSource("/v1/jobs/" + encodeURIComponent(job) + "/events?after=" + seen);
    source.onopen = () => (status.textContent = "Live.");
    source.onerror = () => (status.textContent = "Connection lost; reconnecting, then resuming where it left off.");
    source.onmessage = (message) => {
      const seq = Number(message.lastEventId);
      if (seq && seq <= seen) return; // already shown: a resumed stream never duplicates
      seen = seq || seen;
      const event = JSON.parse(message.data);
      log.appendChild(eventLine(seq, event));
      while (log.children.length > 2000) log.removeChild(log.firstElementChild); // a long job stays light
      if (event.type === "feedback" || event.type === "progress") {
        const key = event.type === "progress" ? "phase:" + event.slug : event.activity_id;
        const previous = rows.querySelector('tr[data-key="' + CSS.escape(key) + '"]');
        const row = activityRow(event, previous);
        if (previous) previous.replaceWith(row);
        else rows.appendChild(row);
      }
    };
    source.addEventListener("gap", (message) => {
      const gap = JSON.parse(message.data);
      const line = el("li", null, "gap");
      line.appendChild(el("strong", "GAP "));
      line.appendChild(document.createTextNode(JSON.stringify(gap) + ": these events were dropped by the journal"));
      log.appendChild(line);
    });
    source.addEventListener("end", () => {
      source.close();
      status.textContent = "The job ended.";
      showOutcome(job).catch(() => {});
    });
    // A prompt appears while the page is open: reload it so its form (with its CSRF token) is rendered.
    setInterval(async () => {
      const response = await fetch("/v1/jobs/" + encodeURIComponent(job) + "/prompts", { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      if (data.prompts.length !== prompts) {
        prompts = data.prompts.length;
        if (prompts > 0) window.location.reload();
      }
    }, 1500);
  }

  // -- deployments: each local workload's log, tailing live -----------------------------------------
  function deploymentsPage() {
    document.querySelectorAll("pre.log-lines").forEach((pre) => {
      const name = pre.dataset.deployment;
      const source = new EventSource("/v1/streams/logs?tail=50&name=" + encodeURIComponent(name));
      source.onmessage = (message) => {
        pre.appendChild(document.createTextNode(JSON.parse(message.data) + "\n"));
        while (pre.childNodes.length > 1000) pre.removeChild(pre.firstChild);
      };
      source.addEventListener("end", () => source.close());
    });
  }
})();
