// The dashboard's own script (no inline script: the CSP allows only these files).
// An open page's live part comes from its event stream; when that stream is lost (the dashboard stopped,
// the network dropped), the page says so, since what it shows is then only as of its last read, and it
// says nothing once the stream is open again (htmx's SSE extension reconnects by itself).
// A migration's stream refused with a 404 (it was withdrawn while its page was open) is not a dashboard that
// cannot be reached: the page asks for itself (HEAD) to tell the two apart.
(function () {
  "use strict";
  function live(state) {
    document.body.setAttribute("data-live", state);
    var lost = document.getElementById("stream-lost");
    if (lost) { lost.hidden = state !== "lost"; }
    var gone = document.getElementById("stream-gone");
    if (gone) { gone.hidden = state !== "gone"; }
  }
  var opened = 0;  // the stream's openings: an answer that comes after the stream opened again is stale
  function failed() {
    if (!document.getElementById("stream-gone")) { live("lost"); return; }
    var asked = opened;
    function told(state) { if (asked === opened) { live(state); } }
    fetch(window.location.href, { method: "HEAD", cache: "no-store", credentials: "same-origin" }).then(
      function (response) { told(response.status === 404 ? "gone" : "lost"); },
      function () { told("lost"); }
    );
  }
  document.addEventListener("htmx:sseOpen", function () { opened += 1; live("open"); });
  document.addEventListener("htmx:sseError", failed);
})();
