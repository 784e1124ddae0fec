"""One router per resource; `app.api.create_app` gathers them."""
