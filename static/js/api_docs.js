// The reward API's reference page: Swagger UI over the schema the API serves. No validator
// badge (Swagger UI would send the schema to validator.swagger.io), no external request.
document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("swagger-ui");
  if (!root || typeof window.SwaggerUIBundle !== "function") {
    return;
  }
  window.SwaggerUIBundle({
    url: root.dataset.schemaUrl,
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    persistAuthorization: false,
    tryItOutEnabled: false,
    withCredentials: false,
  });
});
