"""An --app module that exists but cannot be imported."""

raise RuntimeError("settings.MAIL_HOST is not set")
