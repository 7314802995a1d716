// The dashboard's own script (no inline script: the CSP allows only these files).
// An open page's live part comes from its event stream; when that stream is lost (the dashboard stopped,
// the network dropped), the page says so, since what it shows is then only as of its last read, and it
// says nothing once the stream is open again (htmx's SSE extension reconnects by itself).
(function () {
  "use strict";
  function live(state) {
    document.body.setAttribute("data-live", state);
    var lost = document.getElementById("stream-lost");
    if (lost) { lost.hidden = state !== "lost"; }
  }
  document.addEventListener("htmx:sseOpen", function () { live("open"); });
  document.addEventListener("htmx:sseError", function () { live("lost"); });
})();
