"""What the dashboard's tests share: its password, the basic-auth header,
and reading a page or posting a form through a WSGI test client."""

import base64
import re

PASSWORD = "correct horse ✓"


def credentials(password=PASSWORD, user="anyone"):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def page(client, path, **kwargs):
    response = client.get(path, headers=credentials(), **kwargs)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def csrf_token(text):
    return re.search(r'name="csrf_token" value="([^"]+)"', text)[1]


def post(client, path, token, **form):
    return client.post(path, headers=credentials(), data={"csrf_token": token, **form})
