# Developer shortcuts; npm scripts are the source of truth.
.PHONY: install build proto proto-check test start clean

install:
	npm install

build:
	npm run build

# Regenerates libs/contracts/src from proto/ (ts-proto through buf).
proto:
	cd proto && ../node_modules/.bin/buf lint && ../node_modules/.bin/buf generate

# Fails when the committed generated code is stale.
proto-check: proto
	git diff --exit-code -- libs/contracts/src

test:
	npm test

start:
	npm start

clean:
	npm run clean
