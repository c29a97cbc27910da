"""`{% project_menu as menu %}`: the project menu (labeling.navigation) of the page rendered."""

from typing import Any

from django import template

from labeling.navigation import MenuSection
from labeling.navigation import project_menu as menu_for

register = template.Library()


@register.simple_tag(takes_context=True)
def project_menu(context: Any) -> list[MenuSection]:
    access = context.get("access")
    if access is None:
        return []
    match = getattr(context.get("request"), "resolver_match", None)
    user = context.get("user")
    url_name = match.view_name if match else None
    return menu_for(access, url_name, is_staff=bool(user and user.is_staff))
