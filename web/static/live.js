// Live updates for the pages that opt in (web/templates/live.html): an element carrying
// data-live-after="<head position>" (the notice itself, or <main> or <body>) opens the
// server-sent event stream /api/events/stream after that position, and counts what commits
// in a small "N new events — reload" notice. With data-live-rows="<tbody id>", each new
// event is also added as a row at the top of that table (the /events listing, newest first).
// Everything from the ledger is set as text, never parsed as markup. Without JavaScript the
// page is what the server rendered, unchanged.
"use strict";

(function () {
  var host = document.querySelector("[data-live-after]");
  if (!host || typeof window.EventSource !== "function") {
    return;
  }
  var after = host.getAttribute("data-live-after");
  if (!/^\d+$/.test(after)) {
    return;
  }
  var src = host.getAttribute("data-live-src") ||
    "/api/events/stream?after=" + encodeURIComponent(after);
  var rowsId = host.getAttribute("data-live-rows");
  var rows = rowsId ? document.getElementById(rowsId) : null;
  var notice = host.classList.contains("live-notice") ? host : makeNotice();
  var count = 0;

  function makeNotice() {
    var made = document.createElement("p");
    made.className = "live-notice";
    made.setAttribute("role", "status");
    made.setAttribute("aria-live", "polite");
    made.hidden = true;
    var main = document.querySelector("main") || document.body;
    main.insertBefore(made, main.firstChild);
    return made;
  }

  function showCount() {
    notice.textContent = "";
    notice.appendChild(document.createTextNode(
      count + (count === 1 ? " new event" : " new events") + " \u2014 "));
    var reload = document.createElement("a");
    reload.href = window.location.href;
    reload.textContent = "reload";
    notice.appendChild(reload);
    notice.hidden = false;
  }

  function cell(row, text, className) {
    var td = document.createElement("td");
    if (className) {
      td.className = className;
    }
    if (text !== null) {
      td.textContent = text;
    }
    row.appendChild(td);
    return td;
  }

  function link(td, href, text) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    td.appendChild(a);
  }

  function asOfHref(position) {
    var query = new URLSearchParams(window.location.search);
    query.delete("after");
    query.delete("before");
    query.set("as_of", String(position));
    return "/events?" + query.toString();
  }

  // The same cells as the server's rows (web/templates/events.html).
  function addRow(event) {
    var placeholder = rows.querySelector("tr.none");
    if (placeholder) {
      placeholder.remove();
    }
    var row = document.createElement("tr");
    row.className = "live-new";
    row.setAttribute("data-position", String(event.position));
    link(cell(row, null, "num"), "/events/" + event.position, String(event.position));
    link(cell(row, null, ""), "/events?" + new URLSearchParams({stream: event.stream}),
      event.stream);
    cell(row, String(event.version), "num");
    cell(row, event.type + " v" + event.schema_version, "");
    cell(row, event.recorded_at, "mono");
    cell(row, String(event.hash).slice(0, 16), "mono");
    link(cell(row, null, ""), asOfHref(event.position), "as of " + event.position);
    rows.insertBefore(row, rows.firstChild);
  }

  var source = new EventSource(src);
  source.addEventListener("ledger", function (message) {
    var event;
    try {
      event = JSON.parse(message.data);
    } catch (ignored) {
      return;
    }
    count += 1;
    showCount();
    if (rows) {
      addRow(event);
    }
  });
  // The browser reconnects by itself (resuming with Last-Event-ID); a refused stream
  // (a 4xx) closes it, and the page simply stays as rendered.
  window.addEventListener("pagehide", function () {
    source.close();
  });
})();
