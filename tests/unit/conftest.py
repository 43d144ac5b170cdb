import pytest
from support import LinearPolicy


@pytest.fixture
def linear_policy():
    return LinearPolicy()
