// Refresh the inbox by itself when requests arrive or leave, unless the approver is in the
// middle of something (a reason typed, a box ticked, an edit open); then only show a banner.
(function () {
  "use strict";
  var shown = Array.prototype.map.call(
    document.querySelectorAll("article.request"),
    function (el) { return el.getAttribute("data-request-id"); }
  ).sort().join(",");

  function busy() {
    var typed = Array.prototype.some.call(
      document.querySelectorAll("input[name=reason]"),
      function (el) { return el.value !== ""; }
    );
    return typed || document.querySelector("input[type=checkbox]:checked, details.edit[open]") !== null;
  }

  function poll() {
    fetch("/ui/pending.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body || !body.ok) { return; }
        var now = body.request_ids.slice().sort().join(",");
        if (now === shown) { return; }
        if (busy()) { document.getElementById("new-requests").hidden = false; }
        else { window.location.reload(); }
      })
      .catch(function () {});
  }
  setInterval(poll, 3000);
})();
