"""What a user asks for: the sweep settings' one declaration (``settings``) and the models derived
from it (``models``)."""
