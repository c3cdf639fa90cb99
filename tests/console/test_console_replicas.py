"""The Replicas field of the console's forms: the cluster's default on a new queue, 3 refused
beside the field on one node (in the form's words), the queue's own value on its Settings tab."""

from playwright.sync_api import Page, expect

from tests.console.test_console import queue_url


def test_replicas_from_the_new_queue_form(console: Page, stack, unique_name):
    console.goto(f"{stack.api_url}/projects/default/queues/new")
    console.get_by_label("Name").fill(unique_name)
    replicas = console.get_by_label("Replicas", exact=True)
    expect(replicas).to_have_value("")  # the cluster's default
    replicas.select_option("3")
    console.get_by_role("button", name="Create queue").click()
    expect(replicas).to_have_attribute("aria-invalid", "true")
    expect(console.locator("#f-replicas-error")).to_contain_text("Replicas must be 1 or 3")
    with stack.admin() as admin:
        assert unique_name not in [q["name"] for q in admin.list_queues("default")]  # nothing made
    replicas.select_option("")
    console.get_by_role("button", name="Create queue").click()
    expect(console).to_have_url(queue_url(stack, unique_name))
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["replicas"] == 1  # one node's default
    expect(console.get_by_label("Replicas", exact=True)).to_have_value("1")  # the Settings form shows the queue's own
