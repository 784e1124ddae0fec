"""Against a real `privq serve`: the curator's get-or-create helpers make a setup script
rerunnable (the same tenant, dataset and grant the second time, nothing duplicated), and
the client warns when an answer rests on attributes no measurement touched."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from conftest import ADMIN_KEY, unique_name
from privq_service import SCHEMA, Service, running_service, table

from privq_client import AdminClient, Client, UnmeasuredAttributesWarning


@pytest.fixture(scope="module")
def service(
    backend: str, empty_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("service")
    with running_service(backend, empty_database_url, folder, ADMIN_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def admin(service: Service) -> Iterator[AdminClient]:
    with AdminClient(service.url, service.admin_key) as client:
        yield client


def setup_script(admin: AdminClient, tenant_name: str, dataset_name: str) -> tuple[dict, ...]:
    """What a README snippet does: every step a get-or-create."""
    tenant = admin.ensure_tenant(tenant_name, new_key=True)
    dataset = admin.ensure_dataset(dataset_name, table(), SCHEMA, rho_total=2)
    grant = admin.ensure_grant(dataset["id"], tenant["id"], 1.0)
    return tenant, dataset, grant


def test_a_setup_script_run_twice_finds_what_the_first_run_made(
    service: Service, admin: AdminClient
) -> None:
    tenant_name, dataset_name = unique_name("analyst"), unique_name("people")
    tenant, dataset, grant = setup_script(admin, tenant_name, dataset_name)
    assert tenant["created"] and dataset["created"] and grant["created"]
    again_tenant, again_dataset, again_grant = setup_script(admin, tenant_name, dataset_name)
    assert again_tenant["id"] == tenant["id"] and not again_tenant["created"]
    assert again_dataset["id"] == dataset["id"] and not again_dataset["created"]
    assert again_grant["id"] == grant["id"] and not again_grant["created"]
    assert [d["id"] for d in admin.datasets() if d["name"] == dataset_name] == [dataset["id"]]
    assert len([t for t in admin.tenants() if t["name"] == tenant_name]) == 1
    # Both keys work: the first run's and the one the second run asked for.
    for key in (tenant["api_key"], again_tenant["api_key"]):
        with Client(service.url, key) as analyst:
            assert [d["id"] for d in analyst.datasets()] == [dataset["id"]]


def test_an_existing_tenant_s_key_is_not_shown_and_none_is_issued_unasked(
    admin: AdminClient,
) -> None:
    name = unique_name("tenant")
    first = admin.ensure_tenant(name)
    assert first["created"] and first["api_key"]
    second = admin.ensure_tenant(name)
    assert not second["created"] and second["api_key"] is None
    assert len(admin.tenant(first["id"])["keys"]) == 1


def test_ensure_grant_sets_a_different_limit(admin: AdminClient) -> None:
    tenant = admin.ensure_tenant(unique_name("tenant"))
    dataset = admin.ensure_dataset(unique_name("people"), table(), SCHEMA)
    first = admin.ensure_grant(dataset["id"], tenant["id"], 0.5)
    raised = admin.ensure_grant(dataset["id"], tenant["id"], 0.75)
    assert raised["id"] == first["id"] and raised["rho_limit"] == pytest.approx(0.75)
    assert len(admin.grants(dataset["id"])) == 1


def test_a_name_two_datasets_share_is_refused_with_their_ids(admin: AdminClient) -> None:
    name = unique_name("twice")
    one = admin.upload(table(), SCHEMA, name)
    two = admin.upload(table(), SCHEMA, name)
    with pytest.raises(ValueError, match="choose one by id") as refused:
        admin.ensure_dataset(name, table(), SCHEMA)
    assert one["id"] in str(refused.value) and two["id"] in str(refused.value)


def test_answers_over_unmeasured_attributes_warn_naming_them(
    service: Service, admin: AdminClient
) -> None:
    tenant = admin.ensure_tenant(unique_name("analyst"))
    dataset = admin.ensure_dataset(unique_name("people"), table(), SCHEMA)
    admin.ensure_grant(dataset["id"], tenant["id"], 1.0)
    with Client(service.url, tenant["api_key"]) as analyst:
        analyst.measure(dataset["id"], [["sex", "age"]], rho=0.5).wait(timeout=120, progress=False)
        with pytest.warns(UnmeasuredAttributesWarning, match="region") as caught:
            frame = analyst.marginal(dataset["id"], ["sex", "region"])
        assert caught[0].filename == __file__  # pointed at the caller's line
        assert frame.attrs["unmeasured_attributes"] == ["region"]
        with pytest.warns(UnmeasuredAttributesWarning, match="grade"):
            analyst.count(dataset["id"], {"grade": [1, 2]})
        with pytest.warns(UnmeasuredAttributesWarning, match="region") as caught:
            analyst.query(dataset["id"], by={"region": "value"})
        assert caught[0].filename == __file__
        with pytest.warns(UnmeasuredAttributesWarning, match="grade, region"):
            synthetic = analyst.synthetic(dataset["id"], rows=10, seed=1)
        assert synthetic.attrs["unmeasured_attributes"] == ["grade", "region"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # measured: no warning at all
            analyst.marginal(dataset["id"], ["age", "sex"])
            analyst.count(dataset["id"], {"sex": "F"})
