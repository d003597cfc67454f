# Developer shortcuts; npm scripts are the source of truth.
.PHONY: install build proto proto-check proto-breaking test start clean

install:
	npm install

build:
	npm run build

# Regenerates libs/contracts/src from proto/ (ts-proto through buf).
proto:
	cd proto && ../node_modules/.bin/buf lint && ../node_modules/.bin/buf generate

# Fails when the committed generated code is stale (changed, or new and not committed).
proto-check: proto
	git diff --exit-code -- libs/contracts/src
	@test -z "$$(git status --porcelain -- libs/contracts/src)" || { git status --short -- libs/contracts/src; echo "generated code not committed"; exit 1; }

# Fails when proto/ breaks the wire against main without declaring it (.ci/proto-breaking).
proto-breaking:
	.ci/proto-breaking

test:
	npm test

start:
	npm start

clean:
	npm run clean
