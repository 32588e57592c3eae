# Jupyter server config for e2e tests (NEVER use in production: no auth).
import os

c = get_config()  # noqa: F821
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port = int(os.environ.get("E2E_PORT", "8899"))
c.ServerApp.port_retries = 0
c.ServerApp.open_browser = False
c.ServerApp.root_dir = os.environ["E2E_ROOT"]
c.IdentityProvider.token = ""
c.ServerApp.password = ""
c.ServerApp.disable_check_xsrf = True
c.LabApp.expose_app_in_browser = True  # window.jupyterapp for commands/kernel status
c.LabApp.workspaces_dir = os.environ["E2E_WORKSPACES"]
c.LabApp.user_settings_dir = os.environ["E2E_SETTINGS"]
c.LabApp.news_url = None  # no news fetch
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.ServerApp.terminals_enabled = False
c.ServerApp.allow_root = True  # CI containers often run as root
c.LabApp.extension_manager = "readonly"  # don't query PyPI for extensions
c.FileContentsManager.delete_to_trash = False
