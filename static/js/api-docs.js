// Starts Swagger UI (/docs) or ReDoc (/redoc) from this file: the portal's
// Content-Security-Policy refuses inline scripts.
(() => {
  const swagger = document.getElementById("swagger-ui");
  if (swagger && window.SwaggerUIBundle) {
    const csrfToken = swagger.dataset.csrfToken;
    window.ui = window.SwaggerUIBundle({
      url: swagger.dataset.openapiUrl,
      dom_id: "#swagger-ui",
      layout: "BaseLayout",
      presets: [window.SwaggerUIBundle.presets.apis],
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      // No call to the public validator service.
      validatorUrl: null,
      // "Try it out" signed in by the session cookie: state changes need the session's
      // CSRF token, as the portal's pages send it. Requests with a token need none.
      requestInterceptor: (request) => {
        if (csrfToken && !request.headers.Authorization) {
          request.headers["X-CSRF-Token"] = csrfToken;
        }
        return request;
      },
    });
  }
  const redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    window.Redoc.init(redoc.dataset.openapiUrl, {}, redoc);
  }
})();
