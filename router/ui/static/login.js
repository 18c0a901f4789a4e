// A notification's link names its request after "#", which the server never sees: the
// sign-in form carries it, so the inbox opens at that request once signed in.
(function () {
  "use strict";
  var field = document.getElementById("request");
  if (field) { field.value = window.location.hash; }
})();
