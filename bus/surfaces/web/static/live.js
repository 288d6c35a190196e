// The operator's sessions page, live: rows and messages arrive as server-sent events.
// Everything from the server is put in with textContent, never as HTML.
(function () {
  "use strict";
  var script = document.getElementById("live-script");
  var ui = script.getAttribute("data-ui");
  var live = document.getElementById("live");
  var body = document.querySelector("#sessions tbody");
  var feed = document.getElementById("feed");
  var COLS = ["handle", "host", "state", "turns", "unread", "backlog", "last_at"];

  function when(ms) {
    if (!ms) { return "-"; }
    return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function cell(tr, col) {
    var td = tr.querySelector('[data-col="' + col + '"]');
    if (!td) { td = document.createElement("td"); td.setAttribute("data-col", col); tr.appendChild(td); }
    return td;
  }

  function rowFor(sid) {
    var rows = body.querySelectorAll("tr[data-session]");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-session") === sid) { return rows[i]; }
    }
    var tr = document.createElement("tr");
    tr.setAttribute("data-session", sid);
    var td = document.createElement("td");
    var a = document.createElement("a");
    a.href = ui + "/sessions/" + encodeURIComponent(sid);
    a.textContent = sid;
    td.appendChild(a);
    tr.appendChild(td);
    COLS.forEach(function (c) { cell(tr, c); });
    body.appendChild(tr);
    return tr;
  }

  function update(r) {
    var tr = rowFor(r.session);
    tr.className = "state-" + r.state;
    COLS.forEach(function (c) {
      var td = cell(tr, c);
      if (c === "state") {
        td.textContent = "";
        var b = document.createElement("span");
        b.className = "badge " + r.state;
        b.textContent = r.state;
        td.appendChild(b);
      } else if (c === "last_at") {
        td.textContent = when(r.last_at);
      } else {
        if (c !== "handle" && c !== "host") { td.className = "n"; }
        td.textContent = String(r[c]);
      }
    });
  }

  var es = new EventSource(script.getAttribute("data-events"));
  es.addEventListener("open", function () { live.textContent = "connected…"; });
  es.addEventListener("error", function () {
    live.textContent = "reconnecting…";
    live.setAttribute("data-live", "off");
  });
  es.addEventListener("rows", function (e) {
    JSON.parse(e.data).rows.forEach(update);
    // "live" once the first rows arrived: the server's stream positions are taken.
    live.textContent = "live";
    live.setAttribute("data-live", "on");
  });
  es.addEventListener("message", function (e) {
    var m = JSON.parse(e.data);
    var empty = feed.querySelector(".empty");
    if (empty) { empty.remove(); }
    var li = document.createElement("li");
    var route = document.createElement("div");
    route.className = "route";
    route.textContent = m.from + " → " + m.session + " · " + when(m.at);
    var text = document.createElement("div");
    text.className = "text";
    text.textContent = m.text;
    li.appendChild(route);
    li.appendChild(text);
    feed.insertBefore(li, feed.firstChild);
    while (feed.children.length > 50) { feed.removeChild(feed.lastChild); }
    var tr = rowFor(m.session);
    tr.classList.remove("flash");
    void tr.offsetWidth;
    tr.classList.add("flash");
  });
}());
